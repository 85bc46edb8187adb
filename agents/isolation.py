"""Keeping tasks apart from each other and from the agent: each task runs as a user of its own.

With root, the agent gives each running task a UID/GID from a pool (`--task-uids`, default
200000-200999), or the owner's own UID where the site maps user names to UIDs
(`--task-user-map`). The task's working directory is 0700 and owned by that user, so another
task cannot read its files; `/proc/<pid>/environ` of a process is readable only by its owner,
so another task cannot read its environment (its secrets); and an unprivileged user cannot
signal another user's processes. The agent keeps root for what needs it: starting the process
as that user, signalling it, and cleaning up after it.

When a pool UID is handed back, nothing of the task that had it may remain for the next task
that gets it: its leftover processes are killed and its files in the shared temporary
directories removed; the attempt's directory is closed to it by the runtime.

Without root the agent cannot switch users: every task runs as the agent's user and can read
the others' environment and files. The agent says so at start, and the node page shows it.
"""
import json
import logging
import os
import shutil
import signal
import threading
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("mlqueue.agent")

DEFAULT_UID_RANGE = "200000-200999"
SHARED_TMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
NO_ISOLATION_WARNING = (
    "tasks run as the agent's own user ({user}): a task can read the environment (secret_env included), files and "
    "checkpoints of every other task on this node and signal its processes. Run the agent as root so that each task "
    "runs as a user of its own (--task-uids).")


@dataclass(frozen=True)
class TaskUser:
    uid: int
    gid: int
    name: str
    pooled: bool  # from the pool (swept on release), or the owner's own mapped UID


class TaskUsers:
    """Hands out a user per running task. Shared by all the virtual nodes of one agent process;
    run one agent per machine, or give each agent a range of its own."""

    def __init__(self, *, uids: range | None, user_map: dict[str, tuple[int, int]] | None = None):
        self.uids, self.user_map = uids, user_map or {}
        self._lock = threading.Lock()
        self._in_use: dict[int, int] = {}  # uid -> running tasks holding it

    @classmethod
    def none(cls) -> "TaskUsers":
        return cls(uids=None)

    @property
    def mode(self) -> str:
        return "uid" if self.uids is not None else "none"

    def acquire(self, owner: str = "") -> TaskUser | None:
        """A user for a new task, or None when tasks run as the agent's own user. Raises
        OSError when every UID of the pool is taken."""
        if self.uids is None:
            return None
        with self._lock:
            if owner in self.user_map:
                uid, gid = self.user_map[owner]
                self._in_use[uid] = self._in_use.get(uid, 0) + 1
                return TaskUser(uid, gid, owner, pooled=False)
            uid = next((u for u in self.uids if u not in self._in_use), None)
            if uid is None:
                raise OSError(f"no free task UID: all {len(self.uids)} of {self.uids.start}-{self.uids.stop - 1} "
                              "are in use")
            self._in_use[uid] = 1
            return TaskUser(uid, uid, f"mlq-task-{uid}", pooled=True)

    def release(self, user: TaskUser | None) -> None:
        """The task has ended: once no task holds the UID, kill what it left running and remove
        what it left in the shared temporary directories."""
        if user is None:
            return
        with self._lock:
            self._in_use[user.uid] -= 1
            if self._in_use[user.uid]:
                return
            del self._in_use[user.uid]
        killed = kill_processes_of(user.uid)
        removed = remove_files_of(user.uid) if user.pooled else 0
        if killed or removed:
            log.info("task user %s: killed %d leftover process(es), removed %d leftover file(s)", user.uid,
                     killed, removed)


def processes_of(uid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    pids.append(int(entry.name))
            except OSError:
                pass  # exited meanwhile
    return pids


def kill_processes_of(uid: int) -> int:
    """SIGKILL every process of `uid`, including any that left the task's process group."""
    pids = processes_of(uid)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(pids)


def remove_files_of(uid: int, dirs=SHARED_TMP_DIRS) -> int:
    removed = 0
    for top in dirs:
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
                removed += 1
            except OSError:
                pass
    return removed


def parse_uid_range(text: str) -> range:
    """"200000-200999" -> range(200000, 201000)."""
    first, dash, last = text.partition("-")
    try:
        low, high = int(first), int(last)
    except ValueError:
        raise ValueError(f"--task-uids takes FIRST-LAST, e.g. {DEFAULT_UID_RANGE}, not {text!r}") from None
    if not dash or not 1000 <= low <= high < 2**32 - 1:
        raise ValueError(f"--task-uids {text!r}: want FIRST-LAST with 1000 <= FIRST <= LAST (no system accounts)")
    return range(low, high + 1)


def load_user_map(path: Path) -> dict[str, tuple[int, int]]:
    """A JSON object of user name -> UID, or -> {"uid": U, "gid": G}."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read --task-user-map {path}: {exc}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"--task-user-map {path}: want a JSON object of user name -> UID")
    users = {}
    for name, value in raw.items():
        if isinstance(value, dict):
            uid, gid = value.get("uid"), value.get("gid", value.get("uid"))
        else:
            uid, gid = value, value
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1000 for v in (uid, gid)):
            raise ValueError(f"--task-user-map {path}: {name!r} needs a UID (and GID) of 1000 or more")
        users[name] = (uid, gid)
    return users


def untraversable(path: Path) -> list[Path]:
    """The directories on the way to `path` that other users cannot pass through: a task's
    HOME under them is out of its own reach by name."""
    return [p for p in (path, *path.parents) if p.exists() and not p.stat().st_mode & 0o001]


def can_switch_users() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0
