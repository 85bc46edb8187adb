"""Sweeps on real agents (issue 16), submitted to the live web server over HTTP: a grid sweep
whose trials report a metric with `mlqueue.report` is ranked by it in the children list; a
random sweep with a seed draws the same trials twice, down to the values that reach each
trial's command and environment, and a sweep without one gets a seed back that reproduces it;
median early stopping stops a clearly worse trial with SIGTERM, it ends EARLY_STOPPED, and its
GPU goes to the next trial while the others still run."""

import inspect
import json
import re
import statistics
import sys
import urllib.request

import pytest
from django.contrib.auth import get_user_model

from scheduling.core.early_stop import STOP_MESSAGE
from scheduling.models import Node
from teams.models import ApiToken
from tests.e2e.cluster import Cluster
from tests.e2e.processes import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TEAM = "research-foundation-models"
ONE_GPU = {"gpu_type": "H100", "gpu_count": 1, "cpu_per_rank": 1, "memory_per_rank_gb": 1}
ENDED = ("SUCCEEDED", "FAILED", "CANCELLED")


@pytest.fixture
def cluster(tmp_path, demo):
    running = Cluster(tmp_path)
    yield running
    running.stop()


class Api:
    """alice's bearer token against the cluster's web server."""

    def __init__(self, url: str):
        self.url = url
        self.token = ApiToken.issue(user=get_user_model().objects.get(username="alice"))[1]

    def call(self, path: str, body: dict | None = None):
        request = urllib.request.Request(
            f"{self.url}/api/v1/{path}",
            data=None if body is None else json.dumps(body).encode(),
            method="GET" if body is None else "POST",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.token}"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def submit(self, body: dict) -> dict:
        return self.call("jobs", {"team": TEAM, "resources": ONE_GPU, "topology_hint": "none", **body})

    def ended(self, job_id: int) -> dict | None:
        found = self.call(f"jobs/{job_id}")
        return found if found["state"] in ENDED else None


def start(cluster: Cluster, nodes: list[dict]) -> Api:
    cluster.start(agents=[])
    cluster.add_fleet(nodes)
    wait_for(lambda: Node.objects.filter(state="READY").count() == len(nodes), timeout=30, what="the fleet READY")
    return Api(cluster.url)


def node(number: int, **fields) -> dict:
    return {"name": f"z1-r1-h100-0{number}", "zone": "z1", "rack": "z1-r1", **fields}


def until(cluster: Cluster, predicate, *, timeout: float, what: str):
    """wait_for, with the processes' logs when it times out."""
    try:
        return wait_for(predicate, timeout=timeout, interval=0.3, what=what)
    except AssertionError as timed_out:
        raise AssertionError(f"{timed_out}\n{cluster.logs()}") from None


# 1. A grid sweep ranked by what its trials report.


def val_loss(lr: float, batch_size: int, step: int) -> float:
    return 100 * lr + batch_size / 64 + 1 / step


# Each trial reports val_loss at steps 1..4 with the helper the agent puts on its PYTHONPATH
# (`-S`: no other mlqueue can be found), its parameters from its substituted command.
GRID_TRIAL = f"""
import sys, time, mlqueue
{inspect.getsource(val_loss)}
lr, batch_size = float(sys.argv[1]), int(sys.argv[2])
for step in range(1, 5):
    mlqueue.report(step=step, val_loss=val_loss(lr, batch_size, step))
    time.sleep(0.1)
"""


def test_a_grid_sweep_ranks_its_trials_by_the_metric_they_report(cluster):
    api = start(cluster, [node(1)])
    parent = api.submit(
        {
            "name": "grid",
            "command": [sys.executable, "-S", "-c", GRID_TRIAL, "{lr}", "{batch_size}"],
            "sweep": {
                "method": "grid",
                "parameters": {"lr": [0.01, 0.001], "batch_size": [32, 64]},
                "parallelism": 4,
                "metric": {"name": "val_loss", "goal": "minimize"},
            },
        }
    )["id"]
    done = until(cluster, lambda: api.ended(parent), timeout=40, what="the sweep to end")
    reported = lambda: all((kid["metric"] or {}).get("reports") == 4 for kid in api.call(f"jobs/{parent}/children"))  # noqa: E731
    until(cluster, reported, timeout=10, what="every trial's 4 reports")

    kids = api.call(f"jobs/{parent}/children")
    # The first parameter by name (batch_size) varies slowest: trial 1 is (32, 0.001), the best;
    # trial 2 (64, 0.01) the worst.
    assert [
        (kid["rank"], kid["trial"], kid["params"], kid["state"], kid["metric"]["best"], kid["metric"]["step"])
        for kid in kids
    ] == [
        (1, 1, {"lr": 0.001, "batch_size": 32}, "SUCCEEDED", val_loss(0.001, 32, 4), 4),
        (2, 3, {"lr": 0.001, "batch_size": 64}, "SUCCEEDED", val_loss(0.001, 64, 4), 4),
        (3, 0, {"lr": 0.01, "batch_size": 32}, "SUCCEEDED", val_loss(0.01, 32, 4), 4),
        (4, 2, {"lr": 0.01, "batch_size": 64}, "SUCCEEDED", val_loss(0.01, 64, 4), 4),
    ]
    assert kids[0]["metric"] == {
        "name": "val_loss",
        "best": val_loss(0.001, 32, 4),
        "best_step": 4,
        "last": val_loss(0.001, 32, 4),
        "step": 4,
        "reports": 4,
    }
    assert done["state"] == "SUCCEEDED"
    assert (done["group"]["succeeded"], done["group"]["failed"], done["group"]["early_stopped"]) == (4, 0, 0)

    series = api.call(f"jobs/{kids[0]['id']}/metrics")["series"]
    assert list(series) == ["val_loss"]
    assert [(p["step"], p["value"], p["rank"], p["attempt"]) for p in series["val_loss"]] == [
        (step, val_loss(0.001, 32, step), 0, 1) for step in range(1, 5)
    ]


# 2. A seed draws the same trials, down to what reaches each trial's process.

# Each trial writes its MLQ_PARAM_* variables and its command's substituted arguments to
# $OUT (an env value with `{trial}` substituted: a file per trial).
RECORDER = """
import json, os, sys
params = {k: v for k, v in os.environ.items() if k.startswith("MLQ_PARAM_")}
with open(os.environ["OUT"], "w") as out:
    json.dump({"trial": os.environ["MLQ_SWEEP_TRIAL"], "env": params, "argv": sys.argv[1:]}, out, sort_keys=True)
"""
RANDOM = {
    "method": "random",
    "parameters": {
        "lr": {"min": 1.0e-5, "max": 1.0e-2, "log": True},
        "dropout": {"min": 0.0, "max": 0.5},
        "layers": {"min": 2, "max": 6, "int": True},
        "optimizer": ["adam", "sgd", "lamb"],
    },
    "max_trials": 4,
    "parallelism": 4,
}
ARGS = ["--lr", "{lr}", "--dropout", "{dropout}", "--layers", "{layers}", "--optimizer", "{optimizer}"]


def recorded(folder) -> dict[int, dict]:
    return {int(path.stem): json.loads(path.read_text()) for path in folder.glob("*.json")}


def test_a_seed_draws_the_same_trials_and_a_sweep_without_one_gets_one_that_does(cluster, tmp_path):
    api = start(cluster, [node(1), node(2)])

    def submit(name: str, seed: int | None) -> dict:
        (tmp_path / name).mkdir()
        sweep = RANDOM if seed is None else {**RANDOM, "seed": seed}
        body = {"command": [sys.executable, "-c", RECORDER, *ARGS], "sweep": sweep}
        return api.submit({**body, "name": name, "env": {"OUT": str(tmp_path / name / "{trial}.json")}})

    first, again, unseeded = submit("first", 7), submit("again", 7), submit("unseeded", None)
    drawn = unseeded["group"]["seed"]
    reproduced = submit("reproduced", drawn)
    sweeps = {"first": first, "again": again, "unseeded": unseeded, "reproduced": reproduced}
    ended = lambda: all(api.ended(sweep["id"]) for sweep in sweeps.values())  # noqa: E731
    until(cluster, ended, timeout=40, what="the four sweeps to end")

    assert isinstance(drawn, int) and 0 <= drawn < 2**32
    assert [sweep["group"]["seed"] for sweep in sweeps.values()] == [7, 7, drawn, drawn]
    files = {name: recorded(tmp_path / name) for name in sweeps}
    params = {
        name: {kid["trial"]: kid["params"] for kid in api.call(f"jobs/{sweep['id']}/children")}
        for name, sweep in sweeps.items()
    }
    for name, sweep in sweeps.items():
        assert api.call(f"jobs/{sweep['id']}")["state"] == "SUCCEEDED", name
        assert sorted(files[name]) == [0, 1, 2, 3], name
        for trial, found in files[name].items():
            # What reached the process is the trial's parameters as the API lists them, floats
            # in their shortest exact form, in both the environment and the command.
            drew = params[name][trial]
            written = {key: str(value) for key, value in drew.items()}
            assert found["env"] == {f"MLQ_PARAM_{key.upper()}": value for key, value in written.items()}, name
            assert found["argv"] == [part.format(**written) for part in ARGS], name
            assert drew["optimizer"] in ("adam", "sgd", "lamb") and 2 <= drew["layers"] <= 6, drew
            assert 1.0e-5 <= drew["lr"] <= 1.0e-2 and 0.0 <= drew["dropout"] <= 0.5, drew
    assert files["again"] == files["first"]
    assert files["reproduced"] == files["unseeded"]
    assert params["again"] == params["first"] and params["reproduced"] == params["unseeded"]
    assert [trial["lr"] for trial in params["first"].values()] != [trial["lr"] for trial in params["unseeded"].values()]
    assert len({trial["lr"] for trial in params["first"].values()}) == 4  # four draws, not one repeated


# 3. Median early stopping.

# Notes `TRIAL start|term|end TIME` in $LEDGER; reports val_loss = 10 * lr + 1 / step every 0.2 s.
# On SIGTERM it notes `term` and exits 0, as a trainer that saves and leaves would. The diverging
# trial (lr 1.0) is also slower (a 0.5 s warm-up, then a step per 0.3 s), so the others are ahead
# of it whenever the rule looks, however their starts fall: the rule judges a trial only against
# others that have reached its step.
STOPPABLE_TRIAL = """
import os, signal, sys, time, mlqueue
trial, lr = os.environ["MLQ_SWEEP_TRIAL"], float(os.environ["MLQ_PARAM_LR"])
def note(what):
    with open(os.environ["LEDGER"], "a") as ledger:
        ledger.write(f"{trial} {what} {time.time():.3f}\\n")
def stop(*_):
    note("term")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
note("start")
slow = lr >= 1
time.sleep(0.5 if slow else 0)
for step in range(1, int(os.environ["STEPS"]) + 1):
    mlqueue.report(step=step, val_loss=10 * lr + 1 / step)
    time.sleep(0.3 if slow else 0.2)
note("end")
"""


def ledger_of(path) -> list[tuple[int, str, float]]:
    return [
        (int(trial), what, float(when))
        for trial, what, when in (line.split() for line in path.read_text().splitlines())
    ]


def loss(lr: float, step: int) -> float:
    """What STOPPABLE_TRIAL reports, for the stop message the test expects."""
    return 10 * lr + 1 / step


def test_median_early_stopping_stops_the_worse_trial_and_gives_its_gpu_to_the_next(cluster, tmp_path):
    api = start(cluster, [node(1, gpu_count=3)])  # three GPUs: a trial starts only on one another left
    ledger = tmp_path / "ledger.txt"
    parent = api.submit(
        {
            "name": "median",
            "command": [sys.executable, "-S", "-c", STOPPABLE_TRIAL],
            "env": {"LEDGER": str(ledger), "STEPS": "40"},
            "sweep": {
                "method": "grid",
                "parameters": {"lr": [0.01, 1.0, 0.02, 0.005]},
                "parallelism": 3,
                "metric": {"name": "val_loss", "goal": "minimize"},
                "early_stop": {"rule": "median", "min_reports": 3},
            },
        }
    )["id"]
    done = until(cluster, lambda: api.ended(parent), timeout=50, what="the sweep to end")

    lines = ledger_of(ledger)
    assert sorted((trial, what) for trial, what, _ in lines) == [
        (0, "end"),
        (0, "start"),
        (1, "start"),
        (1, "term"),
        (2, "end"),
        (2, "start"),
        (3, "end"),
        (3, "start"),
    ], lines  # trial 1 got one SIGTERM and left; the others ran to their end
    times = {(trial, what): when for trial, what, when in lines}
    # Trial 3 waited for a GPU: it started after trial 1 left, while trials 0 and 2 still ran.
    assert times[1, "term"] < times[3, "start"] < min(times[0, "end"], times[2, "end"]), times
    assert done["state"] == "SUCCEEDED"
    group = done["group"]
    assert (group["succeeded"], group["early_stopped"], group["failed"], group["cancelled"]) == (3, 1, 0, 0)

    kids = {kid["trial"]: api.call(f"jobs/{kid['id']}") for kid in api.call(f"jobs/{parent}/children")}
    assert {trial: (kid["state"], kid["failure_class"]) for trial, kid in kids.items()} == {
        0: ("SUCCEEDED", ""),
        1: ("EARLY_STOPPED", "EARLY_STOPPED"),
        2: ("SUCCEEDED", ""),
        3: ("SUCCEEDED", ""),
    }
    # Its GPU went to trial 3; the trial took the SIGTERM, saved and exited 0.
    [stopped], [next_trial] = kids[1]["tasks"], kids[3]["tasks"]
    assert next_trial["gpu_indices"] == stopped["gpu_indices"]
    assert (stopped["state"], stopped["exit_code"]) == ("EARLY_STOPPED", 0)

    events = api.call(f"jobs/{kids[1]['id']}/events")
    events = events["results"] if isinstance(events, dict) else events
    [request] = [e for e in events if e["kind"] == "STOP_REQUESTED"]
    step = int(re.search(r"by step (\d+)", request["message"])[1])
    # Judged at its latest step (at least its third) against trials 0 and 2, trial 3 not yet started.
    why = STOP_MESSAGE.format(
        metric="val_loss",
        best=loss(1.0, step),
        step=step,
        median=statistics.median([loss(0.01, step), loss(0.02, step)]),
        others=2,
        min_reports=3,
    )
    assert (request["reason"], request["actor"], request["message"]) == ("EARLY_STOPPED", "scheduler", why)
    assert step >= 3
    assert [(e["from_state"], e["to_state"], e["reason"], e["message"]) for e in events if e["kind"] == "TRANSITION"][
        -1
    ] == ("RUNNING", "EARLY_STOPPED", "EARLY_STOPPED", "rank 0 ended (exit code 0)")
    reported = api.call(f"jobs/{kids[1]['id']}/metrics")["series"]["val_loss"]
    assert [p["step"] for p in reported][:step] == list(range(1, step + 1))
