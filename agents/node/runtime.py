"""Running one task attempt as a real process: its own process group, its own user (see
agents/node/isolation.py), an environment built from nothing, its stdout/stderr captured to files
and shipped in chunks, its exit observed.

The plain process runtime is the default. A job that names an image runs in it with
`--container-runtime podman` (agents/node/containers.py: limits, GPUs, the task's user), or
through a container hook, a command template with an `{image}` placeholder prepended to the
task's command, e.g.
    --container-hook 'apptainer exec --nv docker://{image}'

An attempt's directory (`jobs/<job>/rank-<r>/attempt-<a>/`) belongs to the agent and holds its
logs; the task works in `work/` inside it, owned by the task's user, mode 0700. The logs stay
out of the task's reach: a task that could replace them with a link would have the agent read
(and ship to the job's owner) whatever file the link names.
"""

import codecs
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from agents.node.checkpoints import CheckpointWatch, marker_path
from agents.node.containers import Podman, check_image, container_name, split_env, visible_gpus
from agents.node.isolation import TaskUser
from agents.node.metrics import MetricsTail, metrics_path
from agents.node.supervise import LEASE_EXPIRED, exit_path, read_exit

# The supervisor is the supervise.py next to this file, run by its path rather than found on
# sys.path (`-I` leaves only the installed packages there): the agent and its supervisors are
# always the same copy of the code, whichever checkout or install the agent was started from.
SUPERVISOR = str(Path(__file__).resolve().with_name("supervise.py"))

LOG_CHUNK_BYTES = 32 * 1024
# Of each stream's file read in one look (the agent looks every 0.2 s): a task printing faster
# than that, or than the server takes it, waits in its file on disk, not in the agent's memory.
LOG_READ_BYTES = 1024 * 1024
# What a task may see of the agent's own environment, unless --pass-env says otherwise.
DEFAULT_PASS_ENV = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TERM",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TMPDIR",
    "LD_LIBRARY_PATH",
    "NVIDIA_DRIVER_CAPABILITIES",
)
# Never passed, whatever --pass-env says: the agent's tokens and the server's secrets.
NEVER_PASSED = re.compile(r"^(MLQ_|DATABASE_URL$|REDIS_URL$|SECRET_KEY$|DJANGO_|PGPASSWORD$|AWS_SECRET)")
DIR_MODE, PRIVATE_MODE = 0o711, 0o700
# What an attempt's status file says when the agent stopped the task on its own way out (its
# supervisor writes LEASE_EXPIRED there): the exit it then records is the agent's doing, and
# reported by its next start as a task lost in the agent's restart, never as the task's own.
AGENT_STOPPED = "agent-stopped"
CAUSE_OF_STATUS = {LEASE_EXPIRED: "lease_expired", AGENT_STOPPED: "lost"}


class NoContainerRuntime(OSError):
    """A job names an image and this agent has no way to run one: running its command on the
    host instead would be another program than the one asked for (other libraries, another
    Python), and could succeed while doing the wrong thing."""

    def __init__(self, image: str):
        super().__init__(
            f"image {image} requested but this node has no container runtime (its agent runs images "
            "with --container-runtime podman or --container-hook)"
        )


def check_pass_env(names: list[str]) -> list[str]:
    """The names an admin asked to pass on; raises ValueError for one that must never be."""
    refused = [name for name in names if NEVER_PASSED.match(name)]
    if refused:
        raise ValueError(
            f"--pass-env {refused[0]}: the agent never passes MLQ_* variables or the server's "
            "secrets (DATABASE_URL, REDIS_URL, SECRET_KEY, ...) to tasks"
        )
    return names


def task_environment(
    assignment_env: dict, *, pass_env, workdir: Path, user: TaskUser | None, helpers: Path | None = None
) -> dict[str, str]:
    """Built from nothing: the allowed part of the agent's environment, then what the scheduler
    sends (its MLQ_* and torchrun variables, the user's env and secret_env). A task with a user
    of its own gets its own HOME and TMPDIR: the agent's are not its to write. `helpers` (the
    directory holding only mlqueue's job helpers) goes last on PYTHONPATH: a job's own
    mlqueue install, if it has one, comes first."""
    env = {name: os.environ[name] for name in pass_env if name in os.environ and not NEVER_PASSED.match(name)}
    if user is not None:
        env.update(HOME=str(workdir), TMPDIR=str(workdir / "tmp"), USER=user.name, LOGNAME=user.name)
    env.update({str(key): str(value) for key, value in assignment_env.items()})
    if helpers is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), str(helpers)) if p)
    return env


def install_helpers(workdir: Path) -> Path:
    """A directory holding only copies of the stdlib-only job helpers (`mlqueue.checkpoint`,
    `mlqueue.report` in mlqueue/__init__.py and mlqueue/metrics_report.py), readable by tasks,
    writable only by the agent. Never the agent's own site-packages: a task imports nothing else
    of the agent's code."""
    from mlqueue import checkpoint, metrics_report

    root = make_dir(workdir / "python", 0o755)
    package = make_dir(root / "mlqueue", 0o755)
    here = Path(checkpoint.__file__).parent
    for source in (here / "__init__.py", Path(checkpoint.__file__), Path(metrics_report.__file__)):
        _install(package / source.name, source.read_text())
    return root


def _install(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def hooked(container_hook: str, image: str) -> list[str]:
    """The container hook's words with `{image}` as one word of them: an image cannot add
    options of its own to the runtime ("--privileged -v /:/host x")."""
    check_image(image)
    return [word.replace("{image}", image) for word in shlex.split(container_hook)]


def attempt_dir(workdir: Path, key: tuple[int, int, int]) -> Path:
    job_id, rank, attempt = key
    return workdir / "jobs" / str(job_id) / f"rank-{rank}" / f"attempt-{attempt}"


def make_dir(path: Path, mode: int, user: TaskUser | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, mode)
    if user is not None:
        os.chown(path, user.uid, user.gid)
    return path


@dataclass
class Stream:
    """A log file being shipped: read through a handle the agent opened itself, how far it was
    read and how many characters went out; `done` once read to its end after the task exited,
    or once the server said it keeps no more of it (then the rest stays in the file)."""

    path: Path
    name: str
    read_bytes: int = 0
    sent_chars: int = 0
    decoder: codecs.IncrementalDecoder = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace"))
    handle: object = None
    done: bool = False

    def open_for_writing(self):
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        self.handle = open(self.path, "rb")
        return fd

    def new_text(self, final: bool = False) -> tuple[int, str]:
        """(offset in characters, text) of the next chunk written since the last call; with
        `final` (the task has exited: nothing more will come), the decoder's last bytes go out
        with the file's end."""
        self.handle.seek(self.read_bytes)
        data = self.handle.read(LOG_CHUNK_BYTES)
        self.read_bytes += len(data)
        at_end = final and len(data) < LOG_CHUNK_BYTES
        # NUL is valid UTF-8 but no text column holds it: one U+FFFD for one NUL keeps offsets true.
        text = self.decoder.decode(data, final=at_end).replace("\x00", "\ufffd")
        self.done = self.done or at_end
        offset, self.sent_chars = self.sent_chars, self.sent_chars + len(text)
        return offset, text

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


def status_path(directory: Path) -> Path:
    return directory / "status"


def supervisor_status(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


class Attempt:
    """What the agent reports of a task attempt, running here or ended."""

    job_id: int
    rank: int
    attempt: int
    exit_code: int | None
    exit_signal: str
    cause: str
    status_file: Path
    # When (time.monotonic()) a stop's grace ends: SIGKILL then, from this agent, whether or
    # not the server's KILL has come (the server may be down: its leader sends that KILL).
    kill_by: float | None = None

    @property
    def key(self) -> tuple[int, int, int]:
        return self.job_id, self.rank, self.attempt

    @property
    def running(self) -> bool:
        return self.exit_code is None and not self.exit_signal

    @property
    def exit_note(self) -> str:
        """For the agent's log line of its exit: why it was stopped, where the lease stopped it
        (its supervisor may have, before the agent's own check: the agent then said nothing)."""
        return ": the lease expired without renewal" if self.cause == "lease_expired" else ""

    def report(self) -> dict:
        state = "running" if self.running else "exited"
        return {
            "job_id": self.job_id,
            "rank": self.rank,
            "attempt": self.attempt,
            "state": state,
            "exit_code": self.exit_code,
            "signal": self.exit_signal,
            "cause": self.cause,
        }

    def forget_exit(self) -> None:
        """The exit is reported: an agent started later must not report it again."""
        try:
            os.unlink(exit_path(self.status_file))
        except FileNotFoundError:
            pass


class TaskProcess(Attempt):
    def __init__(
        self,
        assignment: dict,
        workdir: Path,
        *,
        lease_file: Path,
        container_hook: str = "",
        container: Podman | None = None,
        pass_env=DEFAULT_PASS_ENV,
        user: TaskUser | None = None,
        helpers: Path | None = None,
    ):
        if assignment.get("image") and container is None and not container_hook:
            raise NoContainerRuntime(assignment["image"])
        self.job_id, self.rank, self.attempt = assignment["job_id"], assignment["rank"], assignment["attempt"]
        self.epoch = assignment.get("epoch", 0)
        self.gpu_indices = tuple(assignment.get("gpu_indices", ()))
        self.grace_s = assignment.get("grace_period_seconds", 30)
        self.user, self.helpers = user, helpers
        # Only a job that names an image runs in a container; the others run as plain processes.
        self.container = container if assignment.get("image") else None
        self.container_name = container_name(container.node, self.key) if self.container is not None else ""
        self.dir = make_dir(attempt_dir(workdir, self.key), DIR_MODE)
        for parent in self.dir.parents:
            if parent == workdir:
                break
            os.chmod(parent, DIR_MODE)  # a task's HOME is reached through these
        self.work = make_dir(self.dir / "work", PRIVATE_MODE, user)
        if user is not None:
            make_dir(self.work / "tmp", PRIVATE_MODE, user)
        self.streams = [Stream(self.dir / "stdout.log", "stdout"), Stream(self.dir / "stderr.log", "stderr")]
        self.exit_code: int | None = None
        self.exit_signal = ""
        # When the exit was seen (monotonic), and whether it is queued after the task's last logs.
        self.exited_at, self.exit_queued = 0.0, False
        # Why it ended, when not by itself: "lease_expired" (its supervisor or the agent stopped it
        # because the node's lease ran out) or "lost" (it ran here before the agent restarted).
        self.cause = ""
        self.lease_file, self.status_file = lease_file, status_path(self.dir)
        self.signals_sent: set[str] = set()
        if self.container is not None:  # the image has its own PATH, locale and libraries: not the host's
            pass_env = [name for name in pass_env if name not in DEFAULT_PASS_ENV]
        env = task_environment(assignment["env"], pass_env=pass_env, workdir=self.work, user=user, helpers=helpers)
        # Before the process exists: a marker already there is an earlier attempt's.
        self.checkpoints = CheckpointWatch(
            marker_path(env.get("MLQ_CHECKPOINT_DIR", ""), self.work),
            label=f"job {self.job_id} rank {self.rank} attempt {self.attempt}",
        )
        # One file per rank and attempt, in the task's own directory: ranks never share one.
        env["MLQ_METRICS_FILE"] = str(metrics_path(self.work))
        self.metrics = MetricsTail(
            metrics_path(self.work),
            owner_uid=user.uid if user is not None else None,
            label=f"job {self.job_id} rank {self.rank} attempt {self.attempt}",
        )
        if self.container is not None:
            env = visible_gpus(env, assignment.get("gpu_indices") or [])
        self.process = self._spawn(assignment, container_hook, env)

    def _supervised(self, command: list[str], env_fd: int, env_lines_fd: int) -> list[str]:
        """Through the supervisor: signals reach the whole group, nothing outlives the agent, and
        the supervisor (the agent's user) starts the command as the task's user. `-I` and an
        empty environment: nothing of the task's (PYTHONPATH, LD_PRELOAD, its directory on
        sys.path) may run inside a process of the agent's user. podman runs as the agent's user
        (the container's processes as the task's, with --user) and is told the container's name:
        a container lives on when podman is killed."""
        if self.container is not None:
            who = ["--container", self.container_name, "--keep-fd", str(env_lines_fd)]
        else:
            who = ["--uid", str(self.user.uid), "--gid", str(self.user.gid)] if self.user else []
        return [
            sys.executable,
            "-I",
            SUPERVISOR,
            "--env-fd",
            str(env_fd),
            "--agent-pid",
            str(os.getpid()),
            "--lease-file",
            str(self.lease_file),
            "--status-file",
            str(self.status_file),
            *who,
            "--",
            *command,
        ]

    def _command(self, assignment: dict, container_hook: str, env: dict, env_lines) -> tuple[list[str], dict]:
        """The command the supervisor runs, and the environment it runs it with."""
        if self.container is not None:
            lines, by_name = split_env(env)
            env_lines.write(lines.encode())
            env_lines.flush()
            command = self.container.run_command(
                assignment,
                work=self.work,
                helpers=self.helpers,
                user=self.user,
                env_file_fd=env_lines.fileno(),
                by_name=list(by_name),
            )
            return command, self.container.environment(by_name)
        if container_hook and assignment.get("image"):
            return hooked(container_hook, assignment["image"]) + list(assignment["command"]), env
        return list(assignment["command"]), env

    def _spawn(self, assignment: dict, container_hook: str, env: dict) -> subprocess.Popen:
        out, err = (stream.open_for_writing() for stream in self.streams)
        # The task's environment (its secrets) goes through files with no name, not through argv:
        # as JSON to the supervisor, and as podman's env file to a container.
        with tempfile.TemporaryFile(dir=self.dir) as env_file, tempfile.TemporaryFile(dir=self.dir) as env_lines:
            try:
                command, env = self._command(assignment, container_hook, env, env_lines)
                env_file.write(json.dumps(env).encode())
                env_file.seek(0)
                return subprocess.Popen(
                    self._supervised(command, env_file.fileno(), env_lines.fileno()),
                    cwd=self.work,
                    env={},
                    stdout=out,
                    stderr=err,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    pass_fds=(env_file.fileno(), env_lines.fileno()),
                )
            except OSError:
                self.close()
                raise
            finally:
                os.close(out)
                os.close(err)

    def poll(self) -> bool:
        """True once, when the process has just been seen to exit."""
        if not self.running:
            return False
        if not self._supervisor_ended():
            return False
        if self.process.returncode is None:
            self._kill_group()
        code = self.process.wait()
        if code < 0:
            self.exit_signal = signal.Signals(-code).name
        else:
            self.exit_code = code
        self.exited_at = time.monotonic()
        if not self.cause and supervisor_status(self.status_file) == LEASE_EXPIRED:
            self.cause = "lease_expired"
        return True

    def _supervisor_ended(self) -> bool:
        """Whether the supervisor has exited, seen without reaping it where the system allows."""
        try:
            return os.waitid(os.P_PID, self.process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:  # reaped already (Popen's own poll)
            return True
        except AttributeError:  # no waitid here: reaped as it is seen
            return self.process.poll() is not None

    def _kill_group(self) -> None:
        """SIGKILL to whatever is left of the task's group as its supervisor is seen to exit: what
        the supervisor could not sweep (it was killed itself, by the OOM killer say, or /proc is
        not there). Before the supervisor is reaped: until then its pid, the group's id, is not
        anyone else's."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass  # nothing left in it

    def note_agent_stop(self) -> None:
        """The agent stops this task as it stops itself: said on disk before the task gets its
        SIGTERM, so that the exit it records is not taken for the task's own."""
        try:
            fd = os.open(self.status_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as status:
                status.write(AGENT_STOPPED)
                status.flush()
                os.fsync(status.fileno())
        except OSError:
            pass  # the task is stopped all the same; its next report may then read as its own exit

    def send(self, name: str) -> None:
        """TERM or KILL, each at most once: TERM to the supervisor, which passes it on to the whole
        process group once (sent to the group here as well, every process would get it twice);
        KILL to the whole group, supervisor or not, and to a container's processes (not in the
        group: podman started them through its conmon) by removing the container."""
        if name in self.signals_sent or not self.running:
            return
        self.signals_sent.add(name)
        try:
            if name == "TERM":
                os.kill(self.process.pid, signal.SIGTERM)
            else:
                if self.container is not None:
                    self.container.remove(self.container_name)
                os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def close(self) -> None:
        """The attempt is over and its logs shipped: close them, and close its directory to
        whoever gets this task's UID next."""
        for stream in self.streams:
            stream.close()
        self.metrics.close()
        if self.user is not None:
            try:
                os.chown(self.work, os.geteuid(), os.getegid())
            except OSError:
                pass

    def checkpoint_events(self, *, final: bool = False) -> list[dict]:
        """A `checkpoint` event when the task has confirmed a new checkpoint (checked at most
        every second, and once more as it exits: a trainer saves on SIGTERM, then exits)."""
        found = self.checkpoints.poll(force=final)
        if found is None:
            return []
        return [
            {
                "type": "checkpoint",
                "job_id": self.job_id,
                "rank": self.rank,
                "attempt": self.attempt,
                "epoch": self.epoch,
                "step": found["step"],
                "at": found["at"],
            }
        ]

    def metric_events(self, *, final: bool = False) -> list[dict]:
        """A `metric` event per report the task completed since the last call (read at most every
        second, and to the end as it exits), and a `metric_skipped` event per bad line among the
        first few of the attempt."""
        task = {"job_id": self.job_id, "rank": self.rank, "attempt": self.attempt}
        reports = [{"type": "metric", **task, **found} for found in self.metrics.poll(final=final)]
        return reports + [{"type": "metric_skipped", **task, **bad} for bad in self.metrics.take_skipped()]

    def log_events(self, final: bool = False, *, budget: int = LOG_READ_BYTES, capped=()) -> list[dict]:
        """Log chunks written since the last call, at most `budget` bytes of each stream's file;
        none of a stream named in `capped` (its name), which is done. With `final` (the task
        has exited), call again until `logs_done`."""
        events = []
        for stream in self.streams:
            if stream.name in capped:
                stream.done = True
            start = stream.read_bytes
            while not stream.done and stream.read_bytes - start < budget:
                offset, text = stream.new_text(final=final)
                if text:
                    events.append(self._log_event(stream.name, offset, text))
                elif not final:
                    break  # nothing more for now
        return events

    @property
    def logs_done(self) -> bool:
        return all(stream.done for stream in self.streams)

    def _log_event(self, stream: str, offset: int, text: str) -> dict:
        return {
            "type": "log",
            "job_id": self.job_id,
            "rank": self.rank,
            "attempt": self.attempt,
            "stream": stream,
            "offset": offset,
            "data": text,
        }


class RecordedExit(Attempt):
    """An attempt of this node whose task exited while no agent could report it (the agent was
    killed first): its exit as its supervisor recorded it, to report as a live exit is. Its
    supervisor is gone; the log it wrote after what the dead agent shipped stays in its files."""

    def __init__(self, workdir: Path, key: tuple[int, int, int], ended: dict):
        self.job_id, self.rank, self.attempt = key
        self.status_file = status_path(attempt_dir(workdir, key))
        self.exit_code, self.exit_signal = ended["exit_code"], ended["signal"]
        self.cause = CAUSE_OF_STATUS.get(supervisor_status(self.status_file), "")
        self.exited_at, self.exit_queued = time.monotonic(), False
        self.gpu_indices, self.signals_sent, self.user = (), set(), None
        self.process = EndedProcess(self.exit_code if self.exit_code is not None else -signal.Signals[self.exit_signal])

    @classmethod
    def found(cls, workdir: Path, key: tuple[int, int, int]) -> "RecordedExit | None":
        ended = read_exit(exit_path(status_path(attempt_dir(workdir, key))))
        return cls(workdir, key, ended) if ended is not None else None

    def close(self) -> None:
        pass  # no logs open, and no user held: the restarted agent swept the pool's users


class EndedProcess:
    """The process of a RecordedExit: it ended before this agent started."""

    def __init__(self, returncode: int):
        self.returncode = returncode

    def poll(self) -> int:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        return self.returncode
