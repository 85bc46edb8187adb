"""A container image for the podman tests, built here with no registry: busybox-static's one
binary, a link per applet, and a file only the image holds. `.ci/podman` installs what it takes.

The tests skip where podman cannot run a container at all, which is tried once per session;
on this kind of machine (cgroup v1, no permission to raise rlimits) podman's default runtime
crun fails, and runc with explicit ulimits works: RUNTIME_ARGS is what the agent is given."""

import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

IMAGE = "localhost/mlq-busybox:test"
IMAGE_MARKER = "/etc/mlq-image"
IMAGE_MARKER_TEXT = "inside mlq-busybox"
BUSYBOX = "/bin/busybox"
RUNTIME_ARGS = "--runtime runc --ulimit nofile=1024:1024 --ulimit nproc=1000:1000"


def build_image(directory: Path) -> None:
    """The rootfs as a tar, imported as IMAGE (replacing an older one of that name)."""
    applets = subprocess.run([BUSYBOX, "--list"], capture_output=True, text=True, check=True).stdout.split()
    archive = directory / "rootfs.tar"
    with tarfile.open(archive, "w") as tar:
        for name in ("bin", "etc", "tmp"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if name == "tmp" else 0o755
            tar.addfile(info)
        tar.add(BUSYBOX, arcname="bin/busybox")
        for applet in applets:
            if applet != "busybox":
                link = tarfile.TarInfo(f"bin/{applet}")
                link.type, link.linkname = tarfile.SYMTYPE, "busybox"
                tar.addfile(link)
        marker = directory / "marker"
        marker.write_text(IMAGE_MARKER_TEXT + "\n")
        tar.add(marker, arcname=IMAGE_MARKER.lstrip("/"))
    subprocess.run(["podman", "import", str(archive), IMAGE], capture_output=True, check=True, timeout=120)


@pytest.fixture(scope="session")
def podman_image(tmp_path_factory) -> str:
    """IMAGE, built once (a later session finds it in podman's store), after a first container
    showed that podman runs here."""
    if shutil.which("podman") is None or not Path(BUSYBOX).exists():
        pytest.skip("podman or busybox-static is not installed: `bash .ci/podman` installs them")
    if try_image().stdout.strip() != IMAGE_MARKER_TEXT:
        build_image(tmp_path_factory.mktemp("image"))
        tried = try_image()
        if tried.returncode:
            pytest.skip(f"podman cannot run a container on this machine: {tried.stderr.strip()[-300:]}")
    return IMAGE


def try_image() -> subprocess.CompletedProcess:
    return subprocess.run(
        ["podman", "run", "--rm", *RUNTIME_ARGS.split(), IMAGE, "cat", IMAGE_MARKER],
        capture_output=True,
        text=True,
        timeout=120,
    )


def container_exists(name: str) -> bool:
    return subprocess.run(["podman", "container", "exists", name], timeout=60).returncode == 0
