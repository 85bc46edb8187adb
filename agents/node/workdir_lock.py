"""One agent per node directory.

A node's directory holds its token, the attempts it has run and its lease file. A second
agent on it re-registered with that token, reported no tasks, and the server failed the
first agent's running attempt and ordered it killed. So an agent holds an exclusive lock on
`NODE_DIR/agent.lock` for its whole life, taken before it registers or touches anything
there, and a second one refuses to start. The lock is the kernel's (flock): it goes with the
process, however that process ends, so a stale file never blocks a restart.
"""

import fcntl
import os
from pathlib import Path

LOCK_FILE = "agent.lock"
WORKDIR_BUSY = (
    "another agent (PID {pid}) is already running on {path}: stop it first, or give this agent "
    "another --workdir or --node-name"
)


class WorkdirBusy(Exception):
    pass


def hold_node_dir(node_dir: Path) -> int:
    """Lock NODE_DIR for this process (the file descriptor stays open until it exits), or
    raise WorkdirBusy naming the agent that holds it."""
    path = node_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise WorkdirBusy(WORKDIR_BUSY.format(pid=holder, path=node_dir)) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def release_node_dir(fd: int) -> None:
    os.close(fd)  # the lock goes with the last descriptor of its open file
