"""Running one task attempt as a real process: its own process group, its environment, its
stdout/stderr captured to files and shipped in chunks, its exit observed.

The plain process runtime is the default. A container runtime is a command template with an
`{image}` placeholder, prepended to the task's command when the job names an image, e.g.
    --container-hook 'podman run --rm --network host --device nvidia.com/gpu=all {image}'
    --container-hook 'apptainer exec --nv docker://{image}'
"""
import codecs
import os
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

LOG_CHUNK_BYTES = 32 * 1024


@dataclass
class Stream:
    """A log file being shipped: how far it was read and how many characters went out."""

    path: Path
    name: str
    read_bytes: int = 0
    sent_chars: int = 0
    decoder: codecs.IncrementalDecoder = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace"))

    def new_text(self, final: bool = False) -> tuple[int, str]:
        """(offset in characters, text) of what was written since the last call."""
        with open(self.path, "rb") as handle:
            handle.seek(self.read_bytes)
            data = handle.read(LOG_CHUNK_BYTES)
        self.read_bytes += len(data)
        text = self.decoder.decode(data, final=final)
        offset, self.sent_chars = self.sent_chars, self.sent_chars + len(text)
        return offset, text


class TaskProcess:
    def __init__(self, assignment: dict, workdir: Path, *, container_hook: str = ""):
        self.job_id, self.rank, self.attempt = assignment["job_id"], assignment["rank"], assignment["attempt"]
        self.grace_s = assignment.get("grace_period_seconds", 30)
        self.dir = workdir / "jobs" / str(self.job_id) / f"rank-{self.rank}" / f"attempt-{self.attempt}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.streams = [Stream(self.dir / "stdout.log", "stdout"), Stream(self.dir / "stderr.log", "stderr")]
        self.exit_code: int | None = None
        self.exit_signal = ""
        self.signals_sent: set[str] = set()
        env = {**os.environ, **assignment["env"]}
        command = list(assignment["command"])
        if container_hook and assignment.get("image"):
            command = shlex.split(container_hook.format(image=assignment["image"])) + command
        # Through the supervisor: signals reach the whole group, and nothing outlives the agent.
        command = [sys.executable, "-m", "agents.supervise", "--", *command]
        with open(self.streams[0].path, "wb") as out, open(self.streams[1].path, "wb") as err:
            self.process = subprocess.Popen(command, cwd=self.dir, env=env, stdout=out, stderr=err,
                                            stdin=subprocess.DEVNULL, start_new_session=True)

    @property
    def key(self) -> tuple[int, int, int]:
        return self.job_id, self.rank, self.attempt

    @property
    def running(self) -> bool:
        return self.exit_code is None and not self.exit_signal

    def poll(self) -> bool:
        """True once, when the process has just been seen to exit."""
        if not self.running:
            return False
        code = self.process.poll()
        if code is None:
            return False
        if code < 0:
            self.exit_signal = signal.Signals(-code).name
        else:
            self.exit_code = code
        return True

    def send(self, name: str) -> None:
        """TERM or KILL to the whole process group, each at most once."""
        if name in self.signals_sent or not self.running:
            return
        self.signals_sent.add(name)
        try:
            os.killpg(self.process.pid, signal.SIGTERM if name == "TERM" else signal.SIGKILL)
        except ProcessLookupError:
            pass

    def report(self) -> dict:
        state = "running" if self.running else "exited"
        return {"job_id": self.job_id, "rank": self.rank, "attempt": self.attempt, "state": state,
                "exit_code": self.exit_code, "signal": self.exit_signal}

    def log_events(self, final: bool = False) -> list[dict]:
        events = []
        for stream in self.streams:
            while True:
                offset, text = stream.new_text(final=final)
                if not text:
                    break
                events.append({"type": "log", "job_id": self.job_id, "rank": self.rank, "attempt": self.attempt,
                               "stream": stream.name, "offset": offset, "data": text})
        return events
