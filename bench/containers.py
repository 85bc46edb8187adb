"""What running a task in its image costs, against the same task as a plain process.

    python bench/containers.py [--runs 5] [--runtime-args '--runtime runc --ulimit ...']

Starts the same shell task `--runs` times each way through the agent's own runtime
(agents/node/runtime.py; with root, as a task user of its own), in the busybox image below
(built from busybox-static with no registry, once: later runs find it in podman's store) with
`--container-runtime podman`, and as a plain process: how long from the start until its first
line of output reached its log, and from SIGTERM until it exited (its trap exits at once).
Prints one JSON line of medians and maxima, in milliseconds.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

IMAGE = "localhost/mlq-busybox:test"
IMAGE_MARKER = "/etc/mlq-image"
IMAGE_MARKER_TEXT = "inside mlq-busybox"
BUSYBOX = "/bin/busybox"
# Where podman's default runtime (crun) cannot run: cgroup v1, no permission to raise rlimits.
RUNTIME_ARGS = "--runtime runc --ulimit nofile=1024:1024 --ulimit nproc=1000:1000"
TASK = "trap 'exit 0' TERM; echo up; while :; do sleep 0.05; done"
TASK_UID = 200778


def build_image(directory: Path) -> None:
    """busybox-static's one binary, a link per applet and a file only the image holds, as a tar
    imported as IMAGE (replacing an older one of that name)."""
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


def try_image(runtime_args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["podman", "run", "--rm", *runtime_args.split(), IMAGE, "cat", IMAGE_MARKER],
        capture_output=True,
        text=True,
        timeout=120,
    )


def ensure_image(runtime_args: str, directory: Path) -> subprocess.CompletedProcess:
    """IMAGE, built unless podman's store has it; the last try at running it."""
    tried = try_image(runtime_args)
    if tried.stdout.strip() != IMAGE_MARKER_TEXT:
        build_image(directory)
        tried = try_image(runtime_args)
    return tried


def one_run(workdir: Path, key: int, container) -> tuple[float, float]:
    """(ms from start to its first output, ms from SIGTERM to its exit) of one task."""
    from agents.node.isolation import TaskUser, can_switch_users
    from agents.node.runtime import TaskProcess
    from agents.node.supervise import write_lease

    lease = workdir / "lease"
    write_lease(lease, until=time.monotonic() + 600, grace_s=5)
    user = TaskUser(TASK_UID, TASK_UID, f"mlq-task-{TASK_UID}", pooled=True) if can_switch_users() else None
    assignment = {"job_id": key, "rank": 0, "attempt": 1, "command": ["sh", "-c", TASK], "env": {}}
    assignment.update(image=IMAGE if container else "", cpus=1, memory_gb=1, gpu_indices=[])
    began = time.monotonic()
    task = TaskProcess(assignment, workdir / "node", lease_file=lease, container=container, user=user)
    _wait(lambda: "up" in task.streams[0].path.read_text(), "its first output")
    started = time.monotonic()
    task.send("TERM")
    _wait(task.poll, "its exit")
    stopped = time.monotonic()
    task.close()
    return (started - began) * 1000, (stopped - started) * 1000


def _wait(done, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench/containers.py: no {what} after {timeout_s:g} s")
        time.sleep(0.005)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--runtime-args", default=RUNTIME_ARGS)
    args = parser.parse_args(argv)
    from agents.node.containers import Podman

    with tempfile.TemporaryDirectory() as scratch:
        tried = ensure_image(args.runtime_args, Path(scratch))
        if tried.returncode:
            raise SystemExit(f"bench/containers.py: podman cannot run a container here: {tried.stderr[-300:]}")
        podman = Podman.find(args.runtime_args).for_node(f"bench{os.getpid()}", Path(scratch) / "node")
        figures = {"runs": args.runs}
        for way, container in (("plain", None), ("container", podman)):
            runs = [one_run(Path(scratch), key, container) for key in range(1, args.runs + 1)]
            for index, what in enumerate(("start_to_output", "sigterm_to_exit")):
                values = [run[index] for run in runs]
                figures[f"{way}_{what}_ms_p50"] = round(statistics.median(values), 1)
                figures[f"{way}_{what}_ms_max"] = round(max(values), 1)
    print(json.dumps({**figures, "runtime_args": args.runtime_args}))


if __name__ == "__main__":
    main()
