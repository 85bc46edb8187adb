"""`mlq` and the SDK for job groups (issues 16, 17) against a fake server: --array's Slurm syntax,
--max-failures and --sweep-seed in the spec, a group as one row of `mlq jobs`, its summary and
children in `mlq status` and `mlq children`, and what `mlq cancel` says it did to the children.
No Django, no database."""

import json

import pytest
import yaml

from mlqueue.cli import groups
from mlqueue.cli.app import EXIT_REFUSED
from mlqueue.client import Child
from tests.unit.test_cli import FakeServer, job, run, sdk


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    for name in ("MLQ_SERVER", "MLQ_TOKEN", "MLQ_USER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


@pytest.fixture
def spec_file(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("name: train\nteam: vision\ncommand: [python, train.py]\nresources:\n  gpu_count: 1\n")
    return path


# --- --array's parser ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("0-199%16", {"indices": "0-199", "parallelism": 16}),
        ("0-199", {"indices": "0-199"}),
        ("200", {"indices": "200"}),  # a lone number is that one index, as in Slurm
        ("1,5,9-12", {"indices": "1,5,9-12"}),
        ("1,5,9-12%2", {"indices": "1,5,9-12", "parallelism": 2}),
        ("0-98:2%4", {"indices": "0-98:2", "parallelism": 4}),
        ("3-3", {"indices": "3-3"}),
        (" 1, 5 %3", {"indices": "1,5", "parallelism": 3}),
    ],
)
def test_array_values_in_slurms_syntax(text, expected):
    assert groups.parse_array(text) == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("", groups.BAD_ARRAY_PART.format(part="")),
        ("%4", groups.BAD_ARRAY_PART.format(part="")),
        ("0-", groups.BAD_ARRAY_PART.format(part="0-")),
        ("a-b", groups.BAD_ARRAY_PART.format(part="a-b")),
        ("-3", groups.BAD_ARRAY_PART.format(part="-3")),
        ("1,,2", groups.BAD_ARRAY_PART.format(part="")),
        ("0-10:2:3", groups.BAD_ARRAY_PART.format(part="0-10:2:3")),
        ("5:2", groups.BAD_ARRAY_PART.format(part="5:2")),
        ("1.5", groups.BAD_ARRAY_PART.format(part="1.5")),
        ("9-1", groups.ARRAY_BACKWARDS.format(part="9-1")),
        ("0-9:0", groups.ARRAY_STEP.format(part="0-9:0")),
        ("0-9%0", groups.ARRAY_PARALLELISM.format(limit="0")),
        ("0-9%", groups.ARRAY_PARALLELISM.format(limit="")),
        ("0-9%x", groups.ARRAY_PARALLELISM.format(limit="x")),
        ("0-9%-2", groups.ARRAY_PARALLELISM.format(limit="-2")),
        ("0-9%2%3", groups.ARRAY_PARALLELISM.format(limit="2%3")),
    ],
)
def test_a_malformed_array_value_names_what_is_wrong(text, message):
    with pytest.raises(ValueError) as raised:
        groups.parse_array(text)
    assert str(raised.value) == message


def test_a_bad_array_is_a_usage_error_with_the_message_not_a_traceback(spec_file):
    server = FakeServer({})
    result = run(server, "submit", str(spec_file), "--array", "9-1%4")
    assert result.exit_code == 2
    assert "Invalid value for '--array': '9-1' runs backwards: write the lower index first" in result.stderr
    assert "Traceback" not in result.output + result.stderr
    assert server.requests == []


# --- submit ----------------------------------------------------------------------------------


ARRAY_PARENT = job(
    40,
    group={
        "kind": "array",
        "count": 200,
        "parallelism": 16,
        "max_failures": 5,
        "pending": 200,
        "running": 0,
        "succeeded": 0,
        "failed": 0,
        "cancelled": 0,
        "early_stopped": 0,
    },
)


def test_submit_array_puts_the_indices_parallelism_and_max_failures_in_the_spec(spec_file):
    server = FakeServer({("POST", "/api/v1/jobs"): (201, ARRAY_PARENT)})
    result = run(server, "submit", str(spec_file), "--array", "0-199%16", "--max-failures", "5")
    assert result.exit_code == 0, result.output
    assert server.bodies("POST", "/api/v1/jobs")[0]["array"] == {
        "indices": "0-199",
        "parallelism": 16,
        "max_failures": 5,
    }
    assert result.output.strip() == (
        "submitted job 40 (train): PENDING; array of 200 elements, at most 16 at once, 5 may fail: 200 pending"
    )


def test_array_replaces_the_files_elements_and_keeps_its_other_settings(tmp_path):
    path = tmp_path / "infer.yaml"
    path.write_text("name: infer\ncommand: [x]\narray: {count: 10, parallelism: 4, max_failures: 2}\n")
    server = FakeServer({("POST", "/api/v1/jobs"): (201, ARRAY_PARENT)})
    assert run(server, "submit", str(path), "--array", "3,5,7").exit_code == 0
    assert run(server, "submit", str(path), "--array", "0-4%1", "--max-failures", "0").exit_code == 0
    assert [body["array"] for body in server.bodies("POST", "/api/v1/jobs")] == [
        {"indices": "3,5,7", "parallelism": 4, "max_failures": 2},
        {"indices": "0-4", "parallelism": 1, "max_failures": 0},
    ]


def test_sweep_seed_and_max_failures_go_in_the_specs_sweep_block(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text(
        "name: s\ncommand: [x]\nsweep: {method: random, max_trials: 4, parameters: {lr: {min: 0, max: 1}}}\n"
    )
    server = FakeServer({("POST", "/api/v1/jobs"): (201, job(41))})
    result = run(server, "submit", str(path), "--sweep-seed", "7", "--max-failures", "1")
    assert result.exit_code == 0, result.output
    assert server.bodies("POST", "/api/v1/jobs")[0]["sweep"] == {
        "method": "random",
        "max_trials": 4,
        "parameters": {"lr": {"min": 0, "max": 1}},
        "seed": 7,
        "max_failures": 1,
    }


@pytest.mark.parametrize(
    "spec, args, message",
    [
        ("name: a\ncommand: [x]\n", ["--max-failures", "2"], groups.MAX_FAILURES_NEEDS_GROUP),
        ("name: a\ncommand: [x]\n", ["--sweep-seed", "3"], groups.SEED_NEEDS_SWEEP),
        ("name: a\ncommand: [x]\narray: {count: 3}\n", ["--sweep-seed", "3"], groups.SEED_NEEDS_SWEEP),
        (
            "name: a\ncommand: [x]\nsweep: {method: grid}\n",
            ["--array", "0-3"],
            groups.ARRAY_AND_GROUP.format(kind="sweep"),
        ),
        (
            "name: a\npipeline: {steps: [{name: s, command: [x]}]}\n",
            ["--array", "0-3"],
            groups.ARRAY_AND_GROUP.format(kind="pipeline"),
        ),
        ("name: a\ncommand: [x]\n", ["--array", "0-3", "--follow"], groups.FOLLOW_A_GROUP),
    ],
)
def test_group_options_that_do_not_fit_the_spec_are_usage_errors(tmp_path, spec, args, message):
    path = tmp_path / "job.yaml"
    path.write_text(spec)
    server = FakeServer({})
    result = run(server, "submit", str(path), *args)
    assert result.exit_code == 2
    assert f"Error: {message}" in result.stderr
    assert server.requests == []


def test_the_help_says_what_a_lone_number_means():
    result = run(FakeServer({}), "submit", "--help")
    assert "A lone number is that one index (--array 7 reruns element 7): 200 elements are 0-199" in " ".join(
        result.output.split()
    )


# --- jobs, status, children ------------------------------------------------------------------

GROUP = {
    "kind": "array",
    "count": 12,
    "parallelism": 3,
    "max_failures": 0,
    "pending": 5,
    "running": 3,
    "succeeded": 4,
    "failed": 0,
    "cancelled": 0,
    "early_stopped": 0,
}
ELEMENTS = [
    {**job(50 + i, state=state, name=f"train[{i}]"), "parent": 42, "array_index": i, "retries_used": retries}
    for i, (state, retries) in enumerate([("SUCCEEDED", 0), ("SUCCEEDED", 1), ("RUNNING", 0), ("PENDING", 0)])
]


def test_jobs_asks_for_top_level_rows_and_shows_a_group_as_one_row_with_its_counts():
    rows = [job(42, state="RUNNING", group=GROUP), job(41, state="SUCCEEDED")]
    server = FakeServer({("GET", "/api/v1/jobs"): (200, {"next": None, "results": rows})})
    result = run(server, "jobs")
    assert result.exit_code == 0, result.output
    assert server.requests[0].url.params["top_level"] == "true"
    lines = result.output.splitlines()
    assert lines[0].split() == ["ID", "NAME", "TEAM", "STATE", "PRI", "GPUS", "GROUP"]
    assert lines[1].split() == "42 train vision RUNNING P2 - array of 12: 3 running, 5 pending, 4 succeeded".split()
    # piped, an empty cell is "-" (awk's fields keep their numbers)
    assert lines[2].split() == ["41", "train", "vision", "SUCCEEDED", "P2", "-", "-"]


def test_jobs_children_lists_the_children_with_their_place():
    server = FakeServer({("GET", "/api/v1/jobs"): (200, {"next": None, "results": ELEMENTS[:1]})})
    result = run(server, "jobs", "--children")
    assert "top_level" not in server.requests[0].url.params
    assert result.output.splitlines()[1].split() == "50 train[0] vision SUCCEEDED P2 - job 42 [0]".split()


def test_status_of_an_array_shows_its_summary_and_children():
    server = FakeServer(
        {
            ("GET", "/api/v1/jobs/42"): (200, job(42, state="RUNNING", group=GROUP)),
            ("GET", "/api/v1/jobs/42/children"): (200, ELEMENTS),
        }
    )
    result = run(server, "status", "42")
    assert result.exit_code == 0, result.output
    lines = [line.split() for line in result.output.splitlines()]
    assert " ".join(lines[3]) == "array of 12 elements, at most 3 at once: 3 running, 5 pending, 4 succeeded"
    assert lines[5:] == [
        ["INDEX", "ID", "STATE", "RETRIES", "FAILURE"],
        ["0", "50", "SUCCEEDED", "0", "-"],
        ["1", "51", "SUCCEEDED", "1", "-"],
        ["2", "52", "RUNNING", "0", "-"],
        ["3", "53", "PENDING", "0", "-"],
    ]
    # json is the job alone, as for any job
    as_json = run(server, "status", "42", "-o", "json")
    assert json.loads(as_json.output)["group"] == GROUP


def test_status_lists_the_first_children_and_points_at_the_rest(monkeypatch):
    monkeypatch.setattr(groups, "STATUS_CHILDREN", 2)
    server = FakeServer(
        {
            ("GET", "/api/v1/jobs/42"): (200, job(42, state="RUNNING", group=GROUP)),
            ("GET", "/api/v1/jobs/42/children"): (200, ELEMENTS),
        }
    )
    short = run(server, "status", "42").output.splitlines()
    assert [line.split()[0] for line in short[6:8]] == ["0", "1"]
    assert short[8:] == ["... and 2 more: mlq children 42"]
    full = run(server, "status", "42", "--children").output.splitlines()
    assert [line.split()[0] for line in full[6:]] == ["0", "1", "2", "3"]


SWEEP_GROUP = {
    **GROUP,
    "kind": "sweep",
    "count": 4,
    "parallelism": 2,
    "max_failures": None,
    "pending": 0,
    "running": 0,
    "succeeded": 4,
    "method": "grid",
    "seed": 11,
    "metric": {"name": "val_loss", "goal": "minimize"},
    "early_stop": None,
}
TRIALS = [
    {
        **job(60 + trial, state="SUCCEEDED"),
        "parent": 43,
        "trial": trial,
        "params": {"lr": lr, "batch_size": 32},
        "rank": rank,
        "metric": {"name": "val_loss", "best": best, "best_step": 3, "last": best + 0.01, "step": 4, "reports": 5},
    }
    for rank, (trial, lr, best) in enumerate([(2, 0.001, 0.25), (0, 0.0001, 0.5)], start=1)
] + [{**job(63, state="FAILED"), "parent": 43, "trial": 3, "params": {"lr": 0.01, "batch_size": 64}}]


def test_status_of_a_sweep_ranks_its_trials_with_their_parameters_and_metric():
    server = FakeServer(
        {
            ("GET", "/api/v1/jobs/43"): (200, job(43, state="SUCCEEDED", group=SWEEP_GROUP)),
            ("GET", "/api/v1/jobs/43/children"): (200, TRIALS),
        }
    )
    result = run(server, "status", "43")
    lines = [line.split() for line in result.output.splitlines()]
    assert " ".join(lines[3]) == (
        "sweep of 4 trials, at most 2 at once (grid, seed 11, minimize val_loss): 4 succeeded"
    )
    assert lines[5:] == [
        ["RANK", "TRIAL", "ID", "STATE", "PARAMS", "BEST", "LAST", "STEP"],
        ["1", "2", "62", "SUCCEEDED", "lr=0.001", "batch_size=32", "0.25", "0.26", "4"],
        ["2", "0", "60", "SUCCEEDED", "lr=0.0001", "batch_size=32", "0.5", "0.51", "4"],
        ["-", "3", "63", "FAILED", "lr=0.01", "batch_size=64", "-", "-", "-"],
    ]


def test_status_of_a_child_names_its_place_in_its_group():
    server = FakeServer(
        {
            ("GET", "/api/v1/jobs/51"): (200, {**ELEMENTS[1], "tasks": []}),
            ("GET", "/api/v1/jobs/62"): (200, {**TRIALS[0], "tasks": []}),
        }
    )
    assert run(server, "status", "51").output.splitlines()[-1] == "element 1 of array job 42"
    assert run(server, "status", "62").output.splitlines()[-1] == "trial 2 of sweep job 43: lr=0.001 batch_size=32"


def test_children_lists_them_as_tables_json_or_yaml():
    server = FakeServer({("GET", "/api/v1/jobs/42/children"): (200, ELEMENTS)})
    assert json.loads(run(server, "children", "42", "-o", "json").output) == ELEMENTS
    assert yaml.safe_load(run(server, "children", "42", "-o", "yaml").output) == ELEMENTS
    assert "RESTARTS" in run(server, "children", "42", "-o", "wide").output


@pytest.mark.parametrize("output", ["table", "json", "yaml"])
def test_children_of_a_job_that_is_not_a_group_is_an_error(output):
    """It printed the message but exited 0, as if there were something to list; a job that is
    not found exits 1, and so does one that has no children to list."""
    server = FakeServer({("GET", "/api/v1/jobs/9/children"): (200, [])})
    not_a_group = run(server, "children", "9", "-o", output)
    assert (not_a_group.exit_code, not_a_group.stderr.strip()) == (EXIT_REFUSED, groups.NOT_A_GROUP.format(job=9))
    assert not_a_group.stdout == ""


# --- cancel ----------------------------------------------------------------------------------


def test_cancelling_a_group_says_how_many_children_it_cancelled():
    before = {**GROUP, "pending": 5, "running": 3, "succeeded": 3, "cancelled": 1}
    after = {**GROUP, "pending": 0, "running": 3, "succeeded": 3, "cancelled": 6}
    server = FakeServer(
        {
            ("GET", "/api/v1/jobs/42"): (200, job(42, state="RUNNING", group=before)),
            ("POST", "/api/v1/jobs/42/cancel"): (200, job(42, state="RUNNING", group=after)),
        }
    )
    result = run(server, "cancel", "42")
    assert result.output.strip() == "job 42 (array): cancelled 5 of its 12 elements; 3 stopping on their nodes; RUNNING"
    done = {**after, "running": 0, "cancelled": 9}
    server.routes[("POST", "/api/v1/jobs/42/cancel")] = (200, job(42, state="CANCELLED", group=done))
    assert run(server, "cancel", "42").output.strip() == "job 42 (array): cancelled 8 of its 12 elements; CANCELLED"


# --- the SDK ---------------------------------------------------------------------------------


def test_sdk_children_and_metrics_call_their_endpoints():
    series = {"job": 62, "series": {"val_loss": [{"step": 1, "value": 0.5}]}}
    server = FakeServer(
        {
            ("GET", "/api/v1/jobs/43/children"): (200, TRIALS),
            ("GET", "/api/v1/jobs/62/metrics"): (200, series),
        }
    )
    client = sdk(server)
    kids = client.children(43)
    assert all(isinstance(kid, Child) for kid in kids)
    assert [(kid.id, kid.trial, kid.rank, kid.params) for kid in kids] == [
        (62, 2, 1, {"lr": 0.001, "batch_size": 32}),
        (60, 0, 2, {"lr": 0.0001, "batch_size": 32}),
        (63, 3, None, {"lr": 0.01, "batch_size": 64}),
    ]
    assert kids[0].metric["best"] == 0.25 and kids[0].raw == TRIALS[0]
    assert client.metrics(kids[0]) == series
    assert client.metrics(62, name="val_loss") == series
    assert [dict(request.url.params) for request in server.requests[1:]] == [{}, {"name": "val_loss"}]


def test_sdk_jobs_sends_booleans_as_the_api_reads_them():
    server = FakeServer({("GET", "/api/v1/jobs"): (200, {"next": None, "results": []})})
    sdk(server).jobs(top_level=True, parent=None)
    sdk(server).jobs(top_level=False)
    assert [dict(request.url.params) for request in server.requests] == [{"top_level": "true"}, {"top_level": "false"}]


PIPELINE = {
    "kind": "pipeline",
    "count": 4,
    "parallelism": 4,
    "max_failures": None,
    "run_dir": "/shared/runs/nightly/42",
    "pending": 0,
    "running": 0,
    "succeeded": 3,
    "failed": 0,
    "cancelled": 0,
    "early_stopped": 0,
    "skipped": 1,
}
STEPS = [
    {**job(50 + i, state=state, name=f"nightly/{step}"), "parent": 42, "step": step, "after": after, "when": when}
    for i, (step, state, after, when) in enumerate(
        [
            ("prepare", "SUCCEEDED", [], "success"),
            ("train", "SUCCEEDED", ["prepare"], "success"),
            ("evaluate", "SUCCEEDED", ["train"], "success"),
            ("notify-failure", "SKIPPED", ["train"], "failure"),
        ]
    )
]


def test_status_of_a_pipeline_lists_its_steps_with_after_and_when():
    server = FakeServer(
        {
            ("GET", "/api/v1/jobs/42"): (200, job(42, state="SUCCEEDED", group=PIPELINE)),
            ("GET", "/api/v1/jobs/42/children"): (200, STEPS),
        }
    )
    result = run(server, "status", "42")
    assert result.exit_code == 0, result.output
    lines = [line.split() for line in result.output.splitlines()]
    assert " ".join(lines[3]) == "pipeline of 4 steps (run directory /shared/runs/nightly/42): 3 succeeded, 1 skipped"
    assert lines[5:] == [
        ["STEP", "ID", "STATE", "AFTER", "WHEN", "FAILURE"],
        ["prepare", "50", "SUCCEEDED", "-", "success", "-"],
        ["train", "51", "SUCCEEDED", "prepare", "success", "-"],
        ["evaluate", "52", "SUCCEEDED", "train", "success", "-"],
        ["notify-failure", "53", "SKIPPED", "train", "failure", "-"],
    ]
    step = run(
        FakeServer({("GET", "/api/v1/jobs/51"): (200, {**STEPS[1], "tasks": []})}),
        "status",
        "51",
    )
    assert "step train of pipeline job 42" in step.output, step.output
