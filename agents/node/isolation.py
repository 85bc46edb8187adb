"""Keeping tasks apart from each other and from the agent: each task runs as a user of its own.

With root, the agent gives each running task a UID/GID from a pool (`--task-uids`, default
200000-299999), or the owner's own UID where the site maps user names to UIDs
(`--task-user-map`). From the pool, a task runs as its job's slot's UID (`FIRST + slot`, the
slot the leader gave the job: scheduling/task_slots.py), the same for every rank and attempt of
the job, so an attempt reads the checkpoints of the one before it; no two jobs not over share a
slot. The task's working directory is 0700 and owned by that user, so another
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

import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("mlqueue.agent")

DEFAULT_UID_RANGE = "200000-299999"
SHARED_TMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
RANGE_LOCKS = Path("/run/mlqueue-agent")
MAP_IN_POOL = (
    "--task-user-map gives {names} UIDs inside --task-uids {first}-{last}: a mapped owner would share a UID with "
    "the jobs given those slots; keep the pool's range apart from every mapped UID"
)
RANGE_OVERLAP = (
    "task UIDs {first}-{last} overlap {low}-{high}, the range of another agent running on this machine: give "
    "each agent on a machine a range of its own (--task-uids)"
)
SLOT_PAST_RANGE = (
    "job {job_id}'s task slot {slot} is past the {size} UIDs of --task-uids {first}-{last}: every job not over "
    "holds a slot, so give the agents a larger range"
)
SLOT_IN_USE = "task UID {uid} (slot {slot}) is still held on this node by the job that had the slot before"
RELEASE_WAIT_S = 30  # at most, for a UID's leftovers to be killed and removed before it is handed out again


class NoTaskUser(OSError):
    """No user to run a task as: the node's doing (its range, a UID still stopping), not the job's."""


NO_ISOLATION_WARNING = (
    "tasks run as the agent's own user ({user}): a task can read this agent's node token and join-token file, the "
    "environment (secret_env included), files and checkpoints of every other task on this node, and signal its "
    "processes. {remedy}"
)
RUN_AS_ROOT = "Run the agent as root so that each task runs as a user of its own (--task-uids)."
ISOLATION_OFF = "Task isolation is off (--isolation none): drop that option to run each task as a user of its own."


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
        inside = sorted(name for name, (uid, _) in self.user_map.items() if uids is not None and uid in uids)
        if inside:
            first, last = uids.start, uids.stop - 1
            raise ValueError(MAP_IN_POOL.format(names=", ".join(inside[:5]), first=first, last=last))
        self._lock = threading.Condition()
        self._releasing: set[int] = set()  # UIDs whose leftovers are being killed and removed
        self._in_use: dict[int, int] = {}  # uid -> running tasks holding it
        self._job_of: dict[int, int | None] = {}  # uid -> the job whose tasks hold it
        self._range_lock = None  # the open lock file that holds this range on the machine (claim)
        self._cursor = 0

    @classmethod
    def none(cls) -> "TaskUsers":
        return cls(uids=None)

    @property
    def mode(self) -> str:
        return "uid" if self.uids is not None else "none"

    def acquire(self, owner: str = "", *, job_id: int | None = None, slot: int | None = None) -> TaskUser | None:
        """A user for a new task of `job_id`, or None when tasks run as the agent's own user: the
        owner's mapped UID; else the UID of the job's `slot`; else (a server that gives no
        slot) the next pool UID round that runs nothing. Raises OSError when there is none."""
        if self.uids is None:
            return None
        with self._lock:
            if owner in self.user_map:
                uid, gid = self.user_map[owner]
                self._hold(uid, job_id)
                return TaskUser(uid, gid, owner, pooled=False)
            uid = self._slot_uid(job_id, slot) if slot is not None else self._next_free_uid()
            self._hold(uid, job_id)
            return TaskUser(uid, uid, f"mlq-task-{uid}", pooled=True)

    def _hold(self, uid: int, job_id: int | None) -> None:
        self._in_use[uid] = self._in_use.get(uid, 0) + 1
        self._job_of[uid] = job_id

    def _slot_uid(self, job_id: int | None, slot: int) -> int:
        if not 0 <= slot < len(self.uids):
            first, last = self.uids.start, self.uids.stop - 1
            raise NoTaskUser(
                SLOT_PAST_RANGE.format(job_id=job_id, slot=slot, size=len(self.uids), first=first, last=last)
            )
        uid = self.uids[slot]
        # A release of this UID under way (another virtual node's thread): its kill would reach
        # the new task. Wait for it, briefly.
        self._lock.wait_for(lambda: uid not in self._releasing, timeout=RELEASE_WAIT_S)
        holder = self._job_of.get(uid, job_id)
        if uid in self._releasing or uid in self._in_use and holder != job_id:
            log.warning("task UID %s (slot %s) is still held by job %s here: job %s waits", uid, slot, holder, job_id)
            raise NoTaskUser(SLOT_IN_USE.format(uid=uid, slot=slot))
        if uid not in self._in_use and processes_of(uid):  # leftovers no held task owns (a kill that gave up)
            kill_processes_of(uid)
        return uid

    def _next_free_uid(self) -> int:
        """For a server that gives no slot (an older one): round the pool from its top down, away
        from the low slots a newer leader hands out first."""
        busy = uids_running(self.uids)
        for step in range(len(self.uids)):
            uid = self.uids[-1 - (self._cursor + step) % len(self.uids)]
            if uid not in self._in_use and uid not in busy and uid not in self._releasing:
                self._cursor = (self._cursor + step + 1) % len(self.uids)
                return uid
        raise NoTaskUser(f"no free task UID: all {len(self.uids)} of {self.uids.start}-{self.uids.stop - 1} are in use")

    def claim(self, lock_dir: Path = RANGE_LOCKS) -> None:
        """At start, before the sweep: hold this range for as long as the agent runs, and refuse
        to start where another agent on this machine holds a range that overlaps it (its sweep
        would kill that agent's running tasks, and its tasks would share their UIDs)."""
        lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(lock_dir / "ranges.lock", "a") as ranges:  # one agent at a time checks and claims
            fcntl.flock(ranges, fcntl.LOCK_EX)
            self._claim(lock_dir)

    def _claim(self, lock_dir: Path) -> None:
        first, last = self.uids.start, self.uids.stop - 1
        for path in sorted(lock_dir.glob("uids-*.lock")):
            try:
                low, high = (int(n) for n in path.stem.removeprefix("uids-").split("-"))
            except ValueError:
                continue
            if low <= last and first <= high and (low, high) != (first, last) and _held(path):
                raise OSError(RANGE_OVERLAP.format(first=first, last=last, low=low, high=high))
        self._range_lock = open(lock_dir / f"uids-{first}-{last}.lock", "a")  # noqa: SIM115  held until exit
        try:
            fcntl.flock(self._range_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OSError(RANGE_OVERLAP.format(first=first, last=last, low=first, high=last)) from None

    def sweep(self) -> None:
        """At start: whatever a pool UID still runs is left from before (an agent killed with
        its tasks' daemons still running): kill it, before any UID is handed out."""
        for uid in sorted(uids_running(self.uids)) if self.uids is not None else ():
            log.warning(
                "task user %s: killed %d process(es) left from before this agent started", uid, kill_processes_of(uid)
            )

    def release(self, user: TaskUser | None) -> None:
        """The task has ended: once no task holds the UID, kill what it left running and remove
        what it left in the shared temporary directories."""
        if user is None:
            return
        with self._lock:
            self._in_use[user.uid] -= 1
            if self._in_use[user.uid]:
                return
            del self._in_use[user.uid], self._job_of[user.uid]
            self._releasing.add(user.uid)  # not handed out again until its leftovers are gone
        try:
            killed = kill_processes_of(user.uid, user.gid)
            removed = remove_files_of(user.uid) if user.pooled else 0
        finally:
            with self._lock:
                self._releasing.discard(user.uid)
                self._lock.notify_all()
        if killed or removed:
            log.info(
                "task user %s: killed %d leftover process(es), removed %d leftover file(s)", user.uid, killed, removed
            )


def _held(path: Path) -> bool:
    """Whether a live process holds the lock at `path` (a lock left by an agent that died is not)."""
    with open(path, "a") as probe:
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(probe, fcntl.LOCK_UN)
        return False


def _owner_uids() -> dict[int, int]:
    """pid -> UID of every live process (a zombie runs nothing: it waits to be reaped)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                uid = entry.stat().st_uid
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue  # exited meanwhile
            if state not in ("Z", "X"):
                found[int(entry.name)] = uid
    return found


def processes_of(uid: int) -> list[int]:
    return [pid for pid, owner in _owner_uids().items() if owner == uid]


def uids_running(uids: range) -> set[int]:
    return {owner for owner in _owner_uids().values() if owner in uids}


def kill_processes_of(uid: int, gid: int | None = None) -> int:
    """SIGKILL every process of `uid`, those that left the task's process group included, and
    those a fork loop makes meanwhile: kill(-1, SIGKILL) sent as `uid` itself reaches all of
    them in one pass of the kernel, which no fork can race. Returns how many there were."""
    count = len(processes_of(uid))
    for _ in range(20):
        if not processes_of(uid):
            break
        try:
            subprocess.run(
                ["/bin/sh", "-c", "kill -9 -1"],
                user=uid,
                group=uid if gid is None else gid,
                extra_groups=[],
                cwd="/",
                env={},
                timeout=10,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        except (OSError, subprocess.SubprocessError):
            for pid in processes_of(uid):  # not root: what this process may signal itself
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    return count


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
    """ "200000-299999" -> range(200000, 300000)."""
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


def task_users_from(isolation: str, uid_range: str, user_map_file) -> TaskUsers:
    """The agent's --isolation, --task-uids and --task-user-map, as the users its tasks run as."""
    if isolation == "none" or isolation == "auto" and not can_switch_users():
        return TaskUsers.none()
    if not can_switch_users():
        raise ValueError("--isolation uid needs the agent to run as root (it starts each task as another user)")
    user_map = load_user_map(user_map_file) if user_map_file else {}
    return TaskUsers(uids=parse_uid_range(uid_range), user_map=user_map)
