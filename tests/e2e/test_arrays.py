"""Arrays on real agents (issue 16), submitted with the real `mlq --array`: an array of 12
one-GPU elements with parallelism 3 never runs more than 3 at once (each element notes its
start and end in a ledger), an element that fails once is retried alone, and the group ends
SUCCEEDED; an array whose elements fail past max_failures ends FAILED with the rest cancelled,
and nothing starts once the group has failed."""

import json
import sys
import textwrap
import time

import pytest

from scheduling.models import Job, Node
from teams.models import AuditEvent
from tests.e2e.cluster import Cluster
from tests.e2e.processes import wait_for
from tests.e2e.test_cli import mlq as mlq  # noqa: F401 (the fixture: the real executable, as a user)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

NODES = [
    {"name": "z1-r1-h100-01", "zone": "z1", "rack": "z1-r1"},
    {"name": "z1-r1-h100-02", "zone": "z1", "rack": "z1-r1"},
]
# Notes `INDEX ATTEMPT start|end|fail TIME` in $LEDGER. FAIL_FIRST: indices whose first attempt
# exits 1; FAIL_ALWAYS: indices that always do; the others end after RUN_S seconds.
ELEMENT = """
import os, sys, time
index, attempt = os.environ["MLQ_ARRAY_INDEX"], os.environ["MLQ_ATTEMPT"]
def note(what):
    with open(os.environ["LEDGER"], "a") as ledger:
        ledger.write(f"{index} {attempt} {what} {time.time():.3f}\\n")
note("start")
failing = index in os.environ.get("FAIL_ALWAYS", "").split(",")
failing = failing or attempt == "1" and index in os.environ.get("FAIL_FIRST", "").split(",")
time.sleep(float(os.environ["FAIL_AFTER_S" if failing else "RUN_S"]))
note("fail" if failing else "end")
sys.exit(1 if failing else 0)
"""


@pytest.fixture
def cluster(tmp_path, demo):
    running = Cluster(tmp_path)
    yield running
    running.stop()


def two_ready_nodes(cluster) -> None:
    """The cluster up with NODES as a simulated fleet (no agent processes), both READY."""
    cluster.start(agents=[])
    cluster.add_fleet(NODES)
    wait_for(lambda: Node.objects.filter(state="READY").count() == 2, timeout=20, what="two READY nodes")


def spec(tmp_path, name: str, env: dict, max_retries: int) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        textwrap.dedent(f"""\
            name: {name}
            team: research-foundation-models
            command: [{json.dumps(sys.executable)}, -c, {json.dumps(ELEMENT)}]
            resources: {{gpu_type: H100, gpu_count: 1, cpu_per_rank: 1, memory_per_rank_gb: 1}}
            topology_hint: none
            restart_policy: {{max_retries: {max_retries}}}
            env: {json.dumps(env)}
            """)
    )
    return str(path)


def ledger_of(path) -> list[tuple[int, int, str, float]]:
    if not path.exists():
        return []
    return [
        (int(index), int(attempt), what, float(when))
        for index, attempt, what, when in (line.split() for line in path.read_text().splitlines())
    ]


def most_at_once(lines) -> int:
    """The largest number of elements between their start and their end (or failure) at one time."""
    edges = sorted((when, 1 if what == "start" else -1) for _, _, what, when in lines)
    running = most = 0
    for _, step in edges:  # at a tie an end (-1) sorts first: an element that ends as another starts
        running += step
        most = max(most, running)
    return most


def starts_per_index(lines) -> dict[int, int]:
    found: dict[int, int] = {}
    for index, _, what, _ in lines:
        if what == "start":
            found[index] = found.get(index, 0) + 1
    return found


def submit(mlq, path: str, *args: str) -> int:
    submitted = mlq("submit", path, *args, "-o", "json")
    assert submitted.returncode == 0, submitted.stderr
    return json.loads(submitted.stdout)["id"]


def group_of(api, parent: int) -> dict:
    return api("alice").get(f"/api/v1/jobs/{parent}").json()


def finished(api, parent: int):
    found = group_of(api, parent)
    return found if found["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") else None


def test_an_array_runs_at_most_its_parallelism_and_retries_a_failed_element_alone(cluster, api, mlq, tmp_path):
    two_ready_nodes(cluster)
    ledger = tmp_path / "ledger.txt"
    env = {"LEDGER": str(ledger), "RUN_S": "1.5", "FAIL_AFTER_S": "0.3", "FAIL_FIRST": "4"}
    began = time.monotonic()
    parent = submit(mlq, spec(tmp_path, "shards", env, max_retries=2), "--array", "0-11%3")
    try:
        done = wait_for(lambda: finished(api, parent), timeout=60, interval=0.5, what="the array to end")
    except AssertionError:
        raise AssertionError(cluster.logs()) from None
    took = time.monotonic() - began

    lines = ledger_of(ledger)
    # 16 GPUs free, 12 elements: only the array's limit holds them to 3 at once, and it is reached.
    assert most_at_once(lines) == 3, lines
    # Element 4 failed once and ran again; no other element ran twice.
    assert starts_per_index(lines) == {index: 2 if index == 4 else 1 for index in range(12)}, lines
    assert [(attempt, what) for index, attempt, what, _ in lines if index == 4] == [
        (1, "start"),
        (1, "fail"),
        (2, "start"),
        (2, "end"),
    ]
    assert done["state"] == "SUCCEEDED"
    assert {key: done["group"][key] for key in ("count", "parallelism", "succeeded", "failed", "cancelled")} == {
        "count": 12,
        "parallelism": 3,
        "succeeded": 12,
        "failed": 0,
        "cancelled": 0,
    }
    listed = mlq("children", str(parent), "-o", "json")
    assert listed.returncode == 0, listed.stderr
    children = json.loads(listed.stdout)
    assert [(c["array_index"], c["state"], c["retries_used"]) for c in children] == [
        (index, "SUCCEEDED", 1 if index == 4 else 0) for index in range(12)
    ]
    shown = mlq("status", str(parent))
    assert "array of 12 elements, at most 3 at once: 12 succeeded" in shown.stdout, shown.stdout + shown.stderr
    assert took < 60


def test_an_array_past_max_failures_fails_and_cancels_the_rest(cluster, api, mlq, tmp_path):
    two_ready_nodes(cluster)
    ledger = tmp_path / "ledger.txt"
    # Two at once: element 0 runs long; 1 fails, then 2 (which takes its slot) fails: one failure
    # more than max_failures allows, while 0 still runs and 3..9 wait.
    env = {"LEDGER": str(ledger), "RUN_S": "30", "FAIL_AFTER_S": "0.3", "FAIL_ALWAYS": "1,2"}
    path = spec(tmp_path, "fails", env, max_retries=0)
    parent = submit(mlq, path, "--array", "0-9%2", "--max-failures", "1")
    try:
        done = wait_for(lambda: finished(api, parent), timeout=30, interval=0.2, what="the array to end")
        wait_for(
            lambda: not Job.objects.filter(parent_id=parent).exclude(state__in=("SUCCEEDED", "FAILED", "CANCELLED")),
            timeout=20,
            what="every element to end",
        )
    except AssertionError:
        raise AssertionError(cluster.logs()) from None
    failed_at = AuditEvent.objects.get(job_id=parent, to_state="FAILED").created_at.timestamp()
    time.sleep(2)  # two heartbeats: an element wrongly started after the failure would have noted it

    lines = ledger_of(ledger)
    assert done["state"] == "FAILED"
    group = group_of(api, parent)["group"]
    assert {key: group[key] for key in ("succeeded", "failed", "cancelled", "pending", "running")} == {
        "succeeded": 0,
        "failed": 2,
        "cancelled": 8,
        "pending": 0,
        "running": 0,
    }
    # Element 0 was running: it was stopped before its end; 3..9 never started. 0 and 1 start
    # together (which notes first is a race); 2 starts in the slot that 1's failure freed.
    noted = [(index, what) for index, _, what, _ in lines]
    assert sorted(noted) == [(0, "start"), (1, "fail"), (1, "start"), (2, "fail"), (2, "start")], lines
    assert noted.index((1, "fail")) < noted.index((2, "start")), lines
    assert [line for line in lines if line[2] == "start" and line[3] > failed_at] == [], (failed_at, lines)
    states = dict(Job.objects.filter(parent_id=parent).values_list("group_index", "state"))
    assert states == {index: "FAILED" if index in (1, 2) else "CANCELLED" for index in range(10)}
