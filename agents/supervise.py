"""The process between the agent and a task:
`python -I -m agents.supervise --env-fd N [--uid U --gid G] -- COMMAND...`.

It runs COMMAND in its own process group, with the environment read from file descriptor N
(as user U and group G, with no other groups and a private umask, when given: the agent's user
stays with the supervisor, which runs isolated from anything the task could set: `-I`, an
empty environment of its own), and
- passes SIGTERM on to the whole group (a checkpoint signal reaches every worker a trainer
  forked, not just the first process);
- kills the whole group if the agent dies (it is reparented), so an agent killed with
  SIGKILL leaves nothing running that the scheduler could start again elsewhere;
- exits as COMMAND did: with its exit code, or by the same signal.
On Linux the kernel also tells it at once when the agent dies (PR_SET_PDEATHSIG with
SIGHUP, whose handler kills the group); the reparenting check is the portable second line.
"""
import ctypes
import json
import os
import signal
import subprocess
import sys
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


USAGE = "usage: python -I -m agents.supervise --env-fd N [--uid U --gid G] -- COMMAND..."
OPTIONS = ("--env-fd", "--uid", "--gid")


def parse(argv: list[str]) -> tuple[dict, list[str]]:
    """(Popen's options for COMMAND, COMMAND); raises ValueError on a bad command line.

    The task's environment comes through a file descriptor, not this process's environment:
    this process may be root, and a task's LD_PRELOAD or PYTHONPATH must not reach it."""
    if "--" not in argv:
        raise ValueError(USAGE)
    options, command = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    pairs = dict(zip(options[0::2], options[1::2]))
    if not command or len(options) % 2 or set(pairs) - set(OPTIONS) or "--env-fd" not in pairs \
            or ("--uid" in pairs) != ("--gid" in pairs):
        raise ValueError(USAGE)
    numbers = {name: int(value) for name, value in pairs.items()}
    with os.fdopen(numbers["--env-fd"], "rb") as handle:
        popen = {"env": json.loads(handle.read())}
    if "--uid" in numbers:
        popen.update(user=numbers["--uid"], group=numbers["--gid"], extra_groups=[], umask=0o077)
    return popen, command


def main(argv: list[str]) -> int:
    try:
        as_user, command = parse(argv)
    except (ValueError, OSError):
        print(USAGE, file=sys.stderr)
        return 2
    parent = os.getppid()
    group = os.getpgrp()
    signal.signal(signal.SIGHUP, lambda *_: _signal_group(group, signal.SIGKILL, spare_self=False))
    notice_parent_death()
    if os.getppid() != parent:  # the agent died before the kernel was told to warn us
        return 1
    try:
        child = subprocess.Popen(command, **as_user)
    except OSError as exc:
        print(f"mlqueue: cannot start {command[0]}: {exc}", file=sys.stderr)
        return 127
    signal.signal(signal.SIGTERM, lambda *_: _signal_group(group, signal.SIGTERM, spare_self=True))
    while child.poll() is None:
        if os.getppid() != parent:  # the agent is gone: nothing of this task may outlive it
            _signal_group(group, signal.SIGKILL, spare_self=False)
        time.sleep(WATCH_S)
    return _exit_like(child.returncode)


def _signal_group(group: int, sig: int, *, spare_self: bool) -> None:
    if spare_self:
        signal.signal(sig, signal.SIG_IGN)
    try:
        os.killpg(group, sig)
    except ProcessLookupError:
        pass


def _exit_like(code: int) -> int:
    if code >= 0:
        return code
    signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
    return 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
