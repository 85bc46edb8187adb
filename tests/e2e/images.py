"""The container image for the podman tests: bench/containers.py builds it from busybox-static,
with no registry, once (a later session finds it in podman's store). `.ci/podman` installs what
it takes.

The tests skip where podman cannot run a container at all, which is tried once per session;
on this kind of machine (cgroup v1, no permission to raise rlimits) podman's default runtime
crun fails, and runc with explicit ulimits works: RUNTIME_ARGS is what the agent is given."""

import shutil
import subprocess
from pathlib import Path

import pytest

from bench.containers import BUSYBOX, IMAGE, RUNTIME_ARGS, ensure_image


@pytest.fixture(scope="session")
def podman_image(tmp_path_factory) -> str:
    """IMAGE, after a first container showed that podman runs here."""
    if shutil.which("podman") is None or not Path(BUSYBOX).exists():
        pytest.skip("podman or busybox-static is not installed: `bash .ci/podman` installs them")
    tried = ensure_image(RUNTIME_ARGS, tmp_path_factory.mktemp("image"))
    if tried.returncode:
        pytest.skip(f"podman cannot run a container on this machine: {tried.stderr.strip()[-300:]}")
    return IMAGE


def container_exists(name: str) -> bool:
    return subprocess.run(["podman", "container", "exists", name], timeout=60).returncode == 0
