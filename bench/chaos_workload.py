"""The fault campaign's workload: a steady stream of ledger jobs (tests/e2e/ledger_job.py)
submitted through the API, as users would, to either web process.

The mix, on 96 GPUs: single tasks of 4 and 8 GPUs and gangs of two 8-GPU ranks, mostly P2/P3
from alice's team, with P0/P1 jobs from paul's team (he leads it: P0 is for leads) that
outrank (and so preempt) them. Every job checkpoints on SIGTERM, except about a third of those
that may be preempted, which ignore it, so that only the SIGKILL at the end of their grace
period stops them. A submit that fails (the web tier down, a 503 while Postgres is) is tried
again later with the same `client_job_id`, so a lost answer never makes a second job."""

import json
import random
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from bench.chaos_services import ROOT
from bench.chaos_timings import TICK_S, Timings

LEDGER_JOB = str(ROOT / "tests" / "e2e" / "ledger_job.py")
IGNORES_SIGTERM = 0.3  # the share of P1-P3 jobs that only SIGKILL stops
TEAMS = {"alice": "research-foundation-models", "paul": "production-ranking"}


@dataclass(frozen=True)
class Shape:
    weight: int
    user: str
    priorities: tuple[str, ...]
    gpus: int


SHAPES = (
    Shape(40, "alice", ("P2", "P3"), 8),
    Shape(15, "alice", ("P3",), 4),
    Shape(20, "alice", ("P2", "P3"), 16),  # a gang: two ranks of 8 GPUs
    Shape(25, "paul", ("P0", "P1"), 8),
)


@dataclass
class Submission:
    client_job_id: str
    user: str
    spec: dict
    job_id: int | None = None
    refused: bool = False  # a 4xx: trying again would not help


@dataclass
class Workload:
    web_ports: list[int]
    tokens: dict[str, str]
    ledger: Path
    timings: Timings
    rng: random.Random
    submissions: list[Submission] = field(default_factory=list)
    answers: Counter = field(default_factory=Counter)  # HTTP status (or "unreachable") -> count
    failures: list[tuple[float, str]] = field(default_factory=list)  # (when, status) of each unanswered submit
    refusals: list[str] = field(default_factory=list)  # 4xx answers: the campaign's own mistakes

    def __post_init__(self):
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._loop, name="chaos-workload", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=30)

    def accepted(self) -> dict[str, int]:
        with self.lock:
            return {s.client_job_id: s.job_id for s in self.submissions if s.job_id is not None}

    def _loop(self) -> None:
        while not self.stopping.wait(self.timings.submit_every_s):
            for waiting in [s for s in self.submissions if s.job_id is None and not s.refused][:5]:
                self.submit(waiting)
            self.submit(self.new_submission())

    def new_submission(self, *, shape: Shape | None = None, priority: str | None = None) -> Submission:
        shape = shape or self.rng.choices(SHAPES, weights=[s.weight for s in SHAPES])[0]
        with self.lock:
            submission = Submission(
                f"chaos-{len(self.submissions) + 1}",
                shape.user,
                self.spec(shape, priority or self.rng.choice(shape.priorities), len(self.submissions) + 1),
            )
            self.submissions.append(submission)
        return submission

    def spec(self, shape: Shape, priority: str, number: int) -> dict:
        run_for = f"{self.rng.uniform(*self.timings.job_s):.1f}"
        env = {
            "LEDGER": str(self.ledger),
            "LEDGER_TAG_JOB": "1",
            "RUN_FOR_FIRST": run_for,
            "RUN_FOR": run_for,
            "TICK_S": str(TICK_S),
        }
        if priority != "P0" and self.rng.random() < IGNORES_SIGTERM:
            env["IGNORE_SIGTERM"] = "1"
        return {
            "team": TEAMS[shape.user],
            "name": f"chaos-{number}",
            "client_job_id": f"chaos-{number}",
            "command": [sys.executable, LEDGER_JOB],
            "priority": priority,
            "grace_period_seconds": self.timings.grace_s,
            "env": env,
            "checkpoint": {"path": str(self.ledger.parent / "checkpoints" / str(number))},
            "resources": {"gpu_count": shape.gpus, "gpu_type": "H100", "cpu_per_rank": 4, "memory_per_rank_gb": 16},
        }

    def submit(self, submission: Submission) -> None:
        port = self.rng.choice(self.web_ports)
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/v1/jobs",
            data=json.dumps(submission.spec).encode(),
            method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.tokens[submission.user]}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                status, body = response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            status, body = exc.code, exc.read().decode(errors="replace")[:300]
        except OSError:
            status, body = "unreachable", ""
        self.answers[status] += 1
        if status not in (200, 201):
            self.failures.append((time.time(), str(status)))
        if status in (200, 201):
            submission.job_id = body["id"]
        elif isinstance(status, int) and 400 <= status < 500 and status != 429:
            submission.refused = True
            self.refusals.append(f"{submission.client_job_id}: HTTP {status} {body}")

    def preempt_now(self, free_gpus: int) -> None:
        """Submit enough P0 work to need more than the free GPUs, so the scheduler must preempt
        (the Celery fault wants a grace window to open)."""
        urgent = next(s for s in SHAPES if "P0" in s.priorities)
        for _ in range(free_gpus // urgent.gpus + 1):
            self.submit(self.new_submission(shape=urgent, priority="P0"))
