"""P0 is for incidents: on a cluster full of fresh P2 jobs, a lead's P0 runs within the
victims' grace period, without waiting for their minimum runtime; the victims get SIGTERM
first (they checkpoint and exit), then come back as new attempts that spent no restart."""

import sys
import time

import pytest

from scheduling.models import Job, Node
from teams.models import AuditEvent
from tests.e2e.cluster import Cluster
from tests.e2e.processes import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

NODES = [
    {"name": "z1-r1-h100-01", "zone": "z1", "rack": "z1-r1"},
    {"name": "z1-r1-h100-02", "zone": "z1", "rack": "z1-r1"},
]
GRACE_S = 5
# Notes `ATTEMPT RESTART_COUNT what time` in $LEDGER; on SIGTERM it checkpoints and exits 0.
VICTIM = """
import os, signal, sys, time
def note(what):
    with open(os.environ["LEDGER"], "a") as f:
        f.write(f"{os.environ['MLQ_ATTEMPT']} {os.environ['MLQ_RESTART_COUNT']} {what} {time.time():.3f}\\n")
def stop(*_):
    note("term")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
note("start")
time.sleep(600 if os.environ["MLQ_ATTEMPT"] == "1" else 1)
note("end")
"""


@pytest.fixture
def cluster(tmp_path, demo):
    running = Cluster(tmp_path)
    yield running
    running.stop()


def submit(api, user: str, team: str, **spec) -> int:
    response = api(user).post("/api/v1/jobs", {"team": team, "name": "e2e-preemption", **spec}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()["id"]


def ledger_of(path) -> list[tuple[str, str, str, float]]:
    if not path.exists():
        return []
    return [
        (a, count, what, float(when))
        for a, count, what, when in (line.split() for line in path.read_text().splitlines())
    ]


def test_p0_runs_within_the_grace_period_on_a_cluster_of_fresh_p2_jobs(cluster, api, tmp_path):
    cluster.start(agents=NODES)
    wait_for(lambda: Node.objects.filter(state="READY").count() == 2, timeout=20, what="two READY nodes")
    ledgers = [tmp_path / f"victim-{i}.txt" for i in range(4)]
    victims = [
        submit(
            api,
            "victor",
            "research-vision",
            command=[sys.executable, "-c", VICTIM],
            priority="P2",
            grace_period_seconds=GRACE_S,
            checkpoint={"path": str(tmp_path / f"ckpt-{i}")},
            env={"LEDGER": str(ledger)},
            resources={"gpu_count": 4, "gpu_type": "H100", "cpu_per_rank": 4, "memory_per_rank_gb": 16},
        )
        for i, ledger in enumerate(ledgers)
    ]
    try:
        wait_for(lambda: all(ledger_of(ledger) for ledger in ledgers), timeout=30, what="4 P2 jobs running")
    except AssertionError:
        raise AssertionError(cluster.logs()) from None

    submitted = time.monotonic()
    incident = submit(
        api,
        "rita",
        "research-foundation-models",
        command=[sys.executable, "-c", "print('fixed')"],
        priority="P0",
        resources={"gpu_count": 16, "gpu_type": "H100", "cpu_per_rank": 4, "memory_per_rank_gb": 16},
    )
    try:
        # The victims are seconds old, far below P1-P3's 10-minute minimum: P0 does not wait.
        wait_for(
            lambda: Job.objects.get(pk=incident).state in ("RUNNING", "SUCCEEDED"),
            timeout=GRACE_S + 10,
            interval=0.05,
            what="the P0 job to run within the grace period + 10 s",
        )
        started_within = time.monotonic() - submitted
        wait_for(
            lambda: all(Job.objects.get(pk=v).state == "SUCCEEDED" for v in victims),
            timeout=60,
            what="the victims to resume and finish",
        )
    except AssertionError:
        raise AssertionError(cluster.logs()) from None
    assert started_within < GRACE_S + 10

    for victim, ledger in zip(victims, ledgers, strict=True):
        lines = ledger_of(ledger)
        first = [what for attempt, _, what, _ in lines if attempt == "1"]
        # SIGTERM first: the first attempt noted it and exited by itself (a SIGKILL leaves no "term").
        # (A stop is signalled again while the task is still exiting: a handler may note it twice.)
        assert first[0] == "start" and set(first[1:]) == {"term"}, lines
        # Then a new attempt, told it is a restart (MLQ_RESTART_COUNT counts earlier attempts,
        # preemptions included), that ran to its end.
        timeline = list(AuditEvent.objects.filter(job_id=victim).values_list("reason", "message"))
        assert [(a, count, what) for a, count, what, _ in lines if a != "1"] == [
            ("2", "1", "start"),
            ("2", "1", "end"),
        ], "\n".join(map(str, timeline))
        job = Job.objects.get(pk=victim)
        # Preemption is counted apart: no restart (infra) or retry (app) budget was spent.
        assert (job.preemptions, job.restarts_used, job.retries_used) == (1, 0, 0)
        assert AuditEvent.objects.filter(job_id=victim, message__contains=f"preempted for job {incident}").exists()
