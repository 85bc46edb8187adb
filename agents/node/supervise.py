"""The process between the agent and a task:
`python -I agents/node/supervise.py --env-fd N --agent-pid P --lease-file F --status-file S
[--uid U --gid G | --container NAME --keep-fd K] -- CMD...`.

It runs COMMAND in its own process group, with the environment read from file descriptor N
(as user U and group G, with no other groups and a private umask, when given: the agent's user
stays with the supervisor, which runs isolated from anything the task could set: `-I`, an
empty environment of its own), and
- passes SIGTERM on to the whole group, once (a checkpoint signal reaches every worker a trainer
  forked, not just the first process; the agent signals this process alone, and the lease's
  SIGTERM below is not sent again: a second SIGTERM would cut a trainer's checkpoint short, or
  kill a Python that exits 0 on the first as it shuts down);
- kills the whole group if the agent (process P) dies, so an agent killed with SIGKILL leaves
  nothing running that the scheduler could start again elsewhere; an agent that died before
  this process could watch it (its parent is no longer P) starts nothing;
- enforces the node's lease itself: the agent writes its lease deadline to F (a monotonic
  time, the system-wide CLOCK_MONOTONIC) each time it renews; at the deadline this process
  sends SIGTERM to the group, and SIGKILL a kill grace later, and notes "lease-expired" in S.
  An agent that is stopped (SIGSTOP), stuck or partitioned cannot renew, and its tasks are
  dead by the deadline all the same: before the leader may requeue them elsewhere (README,
  "Outages");
- records COMMAND's exit (exit code or signal) in the file "exit" beside S, written atomically
  and fsynced before this process exits: an agent killed before it reported the exit finds it
  there when it restarts, and reports it (the task is not run again as lost). An exit that came
  before this process heard of the agent's death (PR_SET_PDEATHSIG below) is recorded all the
  same; a task killed because its agent died records none, and is reported lost;
- once COMMAND has exited, for whatever reason, SIGKILLs whatever it left in the group (a
  background job, a worker that ignored SIGTERM): nothing of the task holds its GPUs after its
  exit is reported. A process that left the group (setsid) is not found this way;
- exits as COMMAND did: with its exit code, or by the same signal.
With `--container NAME`, COMMAND is `podman run --name NAME ...`, run as this process's own user
(the container's processes run as the task's, agents/node/containers.py) with file descriptor K
(its env file) left open for it; SIGTERM reaches the container's process through podman, which
passes signals on; and wherever this process kills the group, it removes the container first: the
container's processes are not in the group, and would outlive a killed podman.
On Linux the kernel also tells it at once when the agent dies (PR_SET_PDEATHSIG with
SIGHUP, whose handler kills the group); the reparenting check is the portable second line.
"""

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

PR_SET_PDEATHSIG = 1
WATCH_S = 0.2


def notice_parent_death() -> None:
    """SIGHUP when the agent dies: not SIGKILL, which would kill only this process and leave
    the task it supervises running."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGHUP)
    except (OSError, AttributeError):
        pass  # not Linux: the reparenting watch below still applies


USAGE = (
    "usage: python -I agents/node/supervise.py --env-fd N --agent-pid P --lease-file F --status-file S "
    "[--uid U --gid G | --container NAME --keep-fd K] -- COMMAND..."
)
REQUIRED = ("--env-fd", "--agent-pid", "--lease-file", "--status-file")
# The sets of options a command line may have: none more, none fewer.
OPTIONS = (set(REQUIRED), {*REQUIRED, "--uid", "--gid"}, {*REQUIRED, "--container", "--keep-fd"})
NUMBERS = ("--env-fd", "--agent-pid", "--uid", "--gid", "--keep-fd")
REMOVE_TIMEOUT_S = 30
LEASE_EXPIRED = "lease-expired"
EXIT_FILE = "exit"
# Rounds of the sweep of the group after the task's exit: a process forking as it is killed
# leaves children for the next round.
SWEEP_ROUNDS = 20


def exit_path(status_file) -> str:
    """Where the supervisor of the attempt with this status file records its task's exit."""
    return os.path.join(os.path.dirname(os.fspath(status_file)), EXIT_FILE)


def parse(argv: list[str]) -> tuple[dict, dict, list[str]]:
    """(Popen's options for COMMAND, the lease and status files, COMMAND); raises ValueError on
    a bad command line.

    The task's environment comes through a file descriptor, not this process's environment:
    this process may be root, and a task's LD_PRELOAD or PYTHONPATH must not reach it."""
    if "--" not in argv:
        raise ValueError(USAGE)
    options, command = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    pairs = dict(zip(options[0::2], options[1::2], strict=False))  # an odd count is refused below
    if not command or len(options) % 2 or set(pairs) not in OPTIONS:
        raise ValueError(USAGE)
    numbers = {name: int(value) for name, value in pairs.items() if name in NUMBERS}
    with os.fdopen(numbers["--env-fd"], "rb") as handle:
        popen = {"env": json.loads(handle.read())}
    if "--uid" in numbers:
        popen.update(user=numbers["--uid"], group=numbers["--gid"], extra_groups=[], umask=0o077)
    if "--keep-fd" in numbers:
        popen.update(pass_fds=(numbers["--keep-fd"],))
    files = {"lease": pairs["--lease-file"], "status": pairs["--status-file"], "agent": numbers["--agent-pid"]}
    files["exit"] = exit_path(pairs["--status-file"])
    if "--container" in pairs:
        files["container"] = {"name": pairs["--container"], "podman": command[0], "env": popen["env"]}
    return popen, files, command


LEASE_KILL_GRACE_S = 5.0


def kill_grace(lease_s: float) -> float:
    """How long after a lease's end its tasks get SIGKILL (SIGTERM comes at the end): 5 s, less
    for a short test lease. The leader's margin is never shorter (scheduling/leader/failures.py)."""
    return min(LEASE_KILL_GRACE_S, lease_s / 4)


def write_lease(path, *, until: float, grace_s: float) -> None:
    """The agent's side: its lease runs until `until` (time.monotonic(), system-wide); tasks
    get SIGTERM then, and SIGKILL `grace_s` later. Replaced atomically: a reader never sees
    half a file."""
    _replace_file(path, json.dumps({"until": until, "grace_s": grace_s}), durable=False)


def write_exit(path, code: int) -> None:
    """Record how the task ended (`code` as Popen.returncode has it): atomically, and on disk
    (fsynced, its directory too) before this process ends, so that no crash of the agent loses it."""
    ended = {"exit_code": code, "signal": ""}
    if code < 0:
        ended = {"exit_code": None, "signal": signal.Signals(-code).name}
    _replace_file(path, json.dumps(ended), durable=True)


def read_exit(path) -> dict | None:
    """The exit a supervisor recorded ({"exit_code": ..., "signal": ...}), or None (none, or not
    one write_exit wrote)."""
    try:
        with open(path) as handle:
            ended = json.load(handle)
        code, name = ended["exit_code"], ended["signal"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if (isinstance(code, int) and name == "") or (code is None and name in signal.Signals.__members__):
        return {"exit_code": code, "signal": name}
    return None


def _replace_file(path, text: str, *, durable: bool) -> None:
    folder, name = os.path.split(os.fspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder or ".", prefix=f".{name}.", suffix=".tmp")  # unique: no two writers share it
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if durable:
        directory = os.open(folder or ".", os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def read_lease(path) -> tuple[float, float] | None:
    try:
        with open(path) as handle:
            lease = json.load(handle)
        return float(lease["until"]), float(lease["grace_s"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


class LeaseWatch:
    """Stops the task's group when the node's lease runs out, whatever the agent is doing."""

    def __init__(self, files: dict, group: int, term: "GroupTerm"):
        self.lease_path, self.status_path, self.group, self.term = files["lease"], files["status"], group, term
        self.container = files.get("container")
        self.until, self.grace_s = read_lease(self.lease_path) or (0.0, 0.0)
        self.terminated = False

    def check(self) -> None:
        self.until, self.grace_s = read_lease(self.lease_path) or (self.until, self.grace_s)
        now = time.monotonic()
        if now >= self.until + self.grace_s:
            self._note(f"the node agent's lease ran out {now - self.until:.1f} s ago: SIGKILL")
            kill_task(self.group, self.container)
        elif now >= self.until and not self.terminated:
            self.terminated = True
            self._note(
                f"the node agent could not renew its lease within the outage bound: SIGTERM, SIGKILL in "
                f"{self.grace_s:g} s"
            )
            self.term.send()

    def _note(self, what: str) -> None:
        print(f"mlqueue: {what}", file=sys.stderr, flush=True)  # the task's stderr: its owner sees why
        with open(self.status_path, "w") as status:
            status.write(LEASE_EXPIRED)


def main(argv: list[str]) -> int:
    try:
        as_user, files, command = parse(argv)
    except (ValueError, OSError):
        print(USAGE, file=sys.stderr)
        return 2
    if read_lease(files["lease"]) is None:
        print(f"mlqueue: no node lease in {files['lease']}: not starting the task", file=sys.stderr)
        return 2
    parent = files["agent"]
    group = os.getpgrp()
    signal.signal(signal.SIGHUP, lambda *_: kill_task(group, files.get("container")))
    notice_parent_death()
    if os.getppid() != parent:  # the agent died before the kernel was told to warn us (even before Python started)
        print("mlqueue: the node agent is gone: not starting the task", file=sys.stderr)
        return 1
    term = GroupTerm(group)
    # Caught before the task exists: a SIGTERM between its start and here would otherwise kill
    # this process alone and leave the task running (a caught signal is reset for the child).
    signal.signal(signal.SIGTERM, lambda *_: term.send())
    try:
        child = subprocess.Popen(command, **as_user)
    except OSError as exc:
        print(f"mlqueue: cannot start {command[0]}: {exc}", file=sys.stderr)
        return 127
    term.started()
    signal.signal(signal.SIGHUP, lambda *_: agent_died(child, group, files))
    lease = LeaseWatch(files, group, term)
    while child.poll() is None:
        if os.getppid() != parent:  # the agent is gone: nothing of this task may outlive it
            agent_died(child, group, files)
        lease.check()
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=WATCH_S)  # not a sleep: the exit is recorded as soon as it comes
    record_exit(files["exit"], child.returncode)
    kill_leftovers(group)
    return _exit_like(child.returncode)


def agent_died(child: subprocess.Popen, group: int, files: dict) -> None:
    """The agent is gone: the task dies with this process. An exit that came first is recorded
    before (the agent's next start reports it), then its group is killed, this process included."""
    code = ended_with(child)
    if code is not None:
        record_exit(files["exit"], code)
    kill_task(group, files.get("container"))


def ended_with(child: subprocess.Popen) -> int | None:
    """The child's returncode if it has exited, looked at without reaping it: this runs in a
    signal handler, maybe while the main loop's wait() holds the child."""
    if child.returncode is not None:
        return child.returncode
    try:
        seen = os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except (ChildProcessError, AttributeError):  # reaped meanwhile (returncode set), or no waitid
        return child.returncode
    if seen is None:
        return None
    return seen.si_status if seen.si_code == os.CLD_EXITED else -seen.si_status


def record_exit(path: str, code: int) -> None:
    try:
        write_exit(path, code)
    except OSError as exc:  # the exit still goes to a live agent, as this process's own
        print(f"mlqueue: cannot record the task's exit in {path}: {exc}", file=sys.stderr, flush=True)


def kill_leftovers(group: int) -> None:
    """SIGKILL to every process still in the task's group but this one, once its main process
    has exited. Only by a supervisor that leads its group (the agent starts it in a session of
    its own), and only where /proc lists processes (elsewhere the agent's SIGKILL to the group,
    as it reaps this process, does it)."""
    if group != os.getpid():
        return  # a group shared with whoever started this process: none of it is the task's
    for _ in range(SWEEP_ROUNDS):
        found = [pid for pid in group_members(group) if pid != group]
        if not found:
            return
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


def group_members(group: int) -> list[int]:
    """The live processes of process group `group`, from /proc (none where there is no /proc)."""
    try:
        names = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []
    members = []
    for name in names:
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue  # gone meanwhile
        state, _parent, pgrp = stat[stat.rindex(b")") + 2 :].split()[:3]  # the name may hold ") "
        if int(pgrp) == group and state not in (b"Z", b"X"):  # a zombie is dead: its parent reaps it
            members.append(int(name))
    return members


class GroupTerm:
    """SIGTERM to the task's group at most once, whoever asks (the agent, the lease), and not
    before the task has started (asked before, it goes as soon as the task exists)."""

    def __init__(self, group: int):
        self.group, self.asked, self.sent, self.child = group, False, False, False

    def send(self) -> None:
        self.asked = True
        if self.child and not self.sent:
            self.sent = True
            _signal_group(self.group, signal.SIGTERM, spare_self=True)

    def started(self) -> None:
        self.child = True
        if self.asked:
            self.send()


def kill_task(group: int, container: dict | None) -> None:
    """SIGKILL to the task's group, this process included; a container first, whose processes
    are not in the group, by removing it."""
    if container is not None:
        try:
            subprocess.run(
                [container["podman"], "rm", "--force", "--ignore", "--time", "0", container["name"]],
                env=container["env"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=REMOVE_TIMEOUT_S,
            )
        except (OSError, subprocess.SubprocessError):
            pass  # the group dies all the same; the agent's sweep removes the container at its next start
    _signal_group(group, signal.SIGKILL, spare_self=False)


def _signal_group(group: int, sig: int, *, spare_self: bool) -> None:
    if spare_self:
        signal.signal(sig, signal.SIG_IGN)
    try:
        os.killpg(group, sig)
    except ProcessLookupError:
        pass


def _exit_like(code: int) -> int:
    """End as the task did: its exit code, or killed by its signal (so the agent reads "signal
    SIGKILL", not an exit code). SIGKILL and SIGSTOP take no handler, so theirs is not reset:
    trying raised OSError, and the task's log got this module's traceback and "exit code 1"."""
    if code >= 0:
        return code
    if -code not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
    return 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


BAD_LEASE_TERMS = (
    "the server's lease is {} s and its heartbeat interval {} s: refused, no task runs under it "
    "(MLQ_OUTAGE_BOUND_S and MLQ_HEARTBEAT_INTERVAL_S on the server must be above 0)"
)


class UnholdableLease(OSError):
    """A heartbeat's reply whose lease cannot be held (bad_lease_terms): not renewed, no new
    work taken; its stop orders are still obeyed (daemon.NodeAgent.stop_unholdable)."""

    def __init__(self, message: str, reply: dict):
        super().__init__(message)
        self.reply = reply


def bad_lease_terms(reply: dict) -> str:
    """Why a server's lease cannot be held, '' if it can: a lease of 0 s or less has expired as
    given (its tasks would be killed at once); an interval of 0 s or less would spin."""
    terms = reply.get("lease_s"), reply.get("heartbeat_interval_s")
    return "" if all(isinstance(v, int | float) and v > 0 for v in terms) else BAD_LEASE_TERMS.format(*terms)
