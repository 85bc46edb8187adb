"""Pipelines on real agents (issue 17), submitted with the real `mlq submit`: the issue's four steps
(prepare, train, evaluate, notify-failure on train's failure) with short commands that note their
start and end in `{run_dir}/ledger`. They run in order; notify-failure is SKIPPED when train
succeeds and runs when it fails (evaluate is then SKIPPED and the pipeline FAILED); a cancel
mid-way leaves no process running and every step finished."""

import json
import os
import sys
import textwrap

import pytest

from scheduling.models import Job, Node
from tests.e2e.cluster import Cluster
from tests.e2e.processes import wait_for
from tests.e2e.test_arrays import NODES, submit
from tests.e2e.test_cli import mlq as mlq  # noqa: F401 (the fixture: the real executable, as a user)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# argv: RUN_DIR NAME SECONDS EXIT. Notes `NAME start|end TIME RUN_ID PID` in RUN_DIR/ledger.
STEP = """
import os, sys, time
run_dir, name, seconds, code = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
os.makedirs(run_dir, exist_ok=True)
def note(what):
    with open(os.path.join(run_dir, "ledger"), "a") as ledger:
        ledger.write(f"{name} {what} {time.time():.3f} {os.environ['MLQ_PIPELINE_RUN_ID']} {os.getpid()}\\n")
note("start")
time.sleep(seconds)
note("end")
sys.exit(code)
"""
FINISHED = ("SUCCEEDED", "FAILED", "CANCELLED", "SKIPPED")


@pytest.fixture
def cluster(tmp_path, demo):
    running = Cluster(tmp_path, MLQ_PIPELINE_RUN_ROOT=str(tmp_path / "runs"))
    yield running
    running.stop()


def ready(cluster) -> None:
    cluster.start(agents=[])
    cluster.add_fleet(NODES)
    wait_for(lambda: Node.objects.filter(state="READY").count() == 2, timeout=20, what="two READY nodes")


def step(name: str, seconds: float, code: int = 0, after: str = "", when: str = "success") -> str:
    command = [sys.executable, "-c", STEP, "{run_dir}", name, str(seconds), str(code)]
    line = f"  - {{name: {name}, command: {json.dumps(command)}"
    if after:
        line += f", after: [{after}], when: {when}"
    return line + "}\n"


def pipeline(tmp_path, *, train_s: float = 0.5, train_exit: int = 0) -> str:
    path = tmp_path / "nightly.yaml"
    path.write_text(
        textwrap.dedent("""\
            name: nightly-ranking
            team: research-foundation-models
            resources: {gpu_type: H100, gpu_count: 1, cpu_per_rank: 1, memory_per_rank_gb: 1}
            topology_hint: none
            restart_policy: {max_retries: 0}
            pipeline:
             steps:
            """)
        + step("prepare", 0.3)
        + step("train", train_s, train_exit, after="prepare")
        + step("evaluate", 0.3, after="train")
        + step("notify-failure", 0.1, after="train", when="failure")
    )
    return str(path)


def ledger(parent: int) -> list[tuple[str, str, float, str, int]]:
    path = Job.objects.get(pk=parent).group["run_dir"] + "/ledger"
    if not os.path.exists(path):
        return []
    with open(path) as lines:
        return [(n, what, float(t), run, int(pid)) for n, what, t, run, pid in (line.split() for line in lines)]


def steps(parent: int) -> dict[str, str]:
    return dict(Job.objects.filter(parent_id=parent).values_list("step_name", "state"))


def run_to_end(api, cluster, parent: int) -> dict:
    def done():
        found = api("alice").get(f"/api/v1/jobs/{parent}").json()
        return found if found["state"] in FINISHED and set(steps(parent).values()) <= set(FINISHED) else None

    try:
        return wait_for(done, timeout=60, interval=0.3, what="the pipeline to end")
    except AssertionError:
        raise AssertionError(cluster.logs()) from None


def times(lines, name: str, what: str) -> float:
    return next(t for n, w, t, _, _ in lines if (n, w) == (name, what))


def test_the_steps_run_in_order_and_notify_failure_is_skipped_when_train_succeeds(cluster, api, mlq, tmp_path):
    ready(cluster)
    parent = submit(mlq, pipeline(tmp_path))
    done = run_to_end(api, cluster, parent)
    lines = ledger(parent)
    assert done["state"] == "SUCCEEDED", lines
    assert steps(parent) == {
        "prepare": "SUCCEEDED",
        "train": "SUCCEEDED",
        "evaluate": "SUCCEEDED",
        "notify-failure": "SKIPPED",
    }
    assert times(lines, "prepare", "end") <= times(lines, "train", "start")
    assert times(lines, "train", "end") <= times(lines, "evaluate", "start")
    assert [n for n, w, *_ in lines if w == "start"] == ["prepare", "train", "evaluate"]
    assert {run for *_, run, _ in lines} == {str(parent)}  # MLQ_PIPELINE_RUN_ID
    shown = mlq("status", str(parent))
    assert "pipeline of 4 steps" in shown.stdout and "3 succeeded, 1 skipped" in shown.stdout, shown.stdout


def test_notify_failure_runs_when_train_fails(cluster, api, mlq, tmp_path):
    ready(cluster)
    parent = submit(mlq, pipeline(tmp_path, train_exit=3))
    done = run_to_end(api, cluster, parent)
    lines = ledger(parent)
    assert done["state"] == "FAILED", lines
    assert steps(parent) == {
        "prepare": "SUCCEEDED",
        "train": "FAILED",
        "evaluate": "SKIPPED",
        "notify-failure": "SUCCEEDED",
    }
    assert times(lines, "train", "end") <= times(lines, "notify-failure", "start")
    assert [n for n, w, *_ in lines if w == "start"] == ["prepare", "train", "notify-failure"]


def test_cancel_mid_way_leaves_nothing_running(cluster, api, mlq, tmp_path):
    ready(cluster)
    parent = submit(mlq, pipeline(tmp_path, train_s=60))
    try:
        wait_for(lambda: any(line[:2] == ("train", "start") for line in ledger(parent)), timeout=30, what="train")
    except AssertionError:
        raise AssertionError(cluster.logs()) from None
    cancelled = mlq("cancel", str(parent))
    assert cancelled.returncode == 0, cancelled.stderr
    done = run_to_end(api, cluster, parent)
    assert done["state"] == "CANCELLED"
    assert steps(parent) == {
        "prepare": "SUCCEEDED",
        "train": "CANCELLED",
        "evaluate": "CANCELLED",
        "notify-failure": "CANCELLED",
    }
    train_pid = next(pid for n, w, _, _, pid in ledger(parent) if (n, w) == ("train", "start"))
    wait_for(lambda: not alive(train_pid), timeout=10, what="train's process to be gone")
    assert ("train", "end") not in [line[:2] for line in ledger(parent)]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
