"""`mlq` and the SDK against a fake server (httpx.MockTransport): configuration, --set, errors
and exit codes, -o json/yaml, --wait, log polling (issue 15). No Django, no database."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml
from click.testing import CliRunner

from mlqueue import cli, client
from mlqueue.cli.app import EXIT_REFUSED
from mlqueue.client import Client, MlqError
from mlqueue.client import sdk as sdk_module
from mlqueue.client.specs import dump_yaml, read_yaml

ROOT = Path(__file__).resolve().parents[2]
SERVER = "http://mlq.test"


class FakeServer:
    """Routes (method, path) to a handler or a canned (status, body); records every request."""

    def __init__(self, routes: dict):
        self.routes = routes
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.routes.get((request.method, request.url.path))
        if answer is None:
            return httpx.Response(404, json={"detail": "Not found."})
        if callable(answer):
            answer = answer(request)
        if isinstance(answer, httpx.Response):
            return answer
        status, body = answer
        return httpx.Response(status, json=body) if body is not None else httpx.Response(status)

    def bodies(self, method: str, path: str) -> list:
        return [json.loads(r.content) for r in self.requests if r.method == method and r.url.path == path and r.content]


def sdk(server: FakeServer, **kwargs) -> Client:
    kwargs.setdefault("token", "tok")
    return Client(server=SERVER, transport=httpx.MockTransport(server), **kwargs)


def run(server: FakeServer, *args, user: str = "ada"):
    def build():
        made = sdk(server)
        made.user = user
        return made

    return CliRunner().invoke(cli.main, list(args), obj={"client": build}, catch_exceptions=False)


def job(job_id=7, state="PENDING", **extra):
    return {"id": job_id, "name": "train", "team": "vision", "owner": "ada", "state": state, "priority": "P2", **extra}


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    for name in ("MLQ_SERVER", "MLQ_TOKEN", "MLQ_USER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setattr(sdk_module.time, "sleep", lambda seconds: None)


@pytest.fixture
def spec_file(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("name: train\nteam: vision\ncommand: [python, train.py]\nresources:\n  gpu_count: 1\n")
    return path


# --- configuration ---------------------------------------------------------------------------


def test_the_environment_wins_over_the_config_file_and_arguments_over_both(monkeypatch, tmp_path):
    client.write_config("http://from-file", "file-token", "ada")
    assert (Client().server, Client().token, Client().user) == ("http://from-file", "file-token", "ada")
    monkeypatch.setenv("MLQ_SERVER", "http://from-env/")
    monkeypatch.setenv("MLQ_TOKEN", "env-token")
    assert (Client().server, Client().token) == ("http://from-env", "env-token")
    assert (Client(server="http://arg", token="arg").server, Client(token="arg").token) == ("http://arg", "arg")


def test_the_config_file_honours_xdg_and_is_readable_by_its_owner_alone(tmp_path):
    path = client.write_config("http://x", 'a"b', "ada")
    assert path == tmp_path / "config" / "mlqueue" / "config.toml"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert client.read_config() == {"server": "http://x", "token": 'a"b', "user": "ada"}


def test_no_server_or_token_is_a_clear_refusal():
    with pytest.raises(MlqError, match="no server"):
        Client(token="t").queue()
    with pytest.raises(MlqError, match="no token"):
        Client(server=SERVER).queue()


def test_login_stores_a_new_token_0600_and_uses_it():
    server = FakeServer(
        {("POST", "/api/v1/tokens"): (201, {"id": 3, "name": "laptop", "token": "s3cret", "hint": "s3c"})}
    )
    result = run(server, "login", "--username", "ada", "--password", "pw", "--name", "laptop")
    assert result.exit_code == 0, result.output
    assert server.bodies("POST", "/api/v1/tokens") == [{"username": "ada", "password": "pw", "name": "laptop"}]
    assert "Authorization" not in server.requests[0].headers
    path = client.config_path()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert client.read_config() == {"server": SERVER, "token": "s3cret", "user": "ada"}


# --- --set -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "item, expected",
    [
        ("resources.gpu_count=16", (["resources", "gpu_count"], 16)),
        ("priority=P1", (["priority"], "P1")),
        ("env.DEBUG=true", (["env", "DEBUG"], "true")),  # an env value is text, as written
        ("env.STEPS=16", (["env", "STEPS"], "16")),
        ("env.STEPS='16'", (["env", "STEPS"], "16")),
        ("checkpoint.interval_minutes=2.5", (["checkpoint", "interval_minutes"], 2.5)),
        ("name=a=b", (["name"], "a=b")),
        # JSON's exponents are numbers, as in YAML 1.2 (YAML 1.1 wanted a dot and a sign).
        ("sweep.lr=1e-5", (["sweep", "lr"], 1e-05)),
        ("max_runtime_hours=1e1", (["max_runtime_hours"], 10.0)),
        ("env.V=1.2.3", (["env", "V"], "1.2.3")),
        # What YAML refuses is an env value as written (an alias, a directive, a flow opened).
        ("env.GLOB=*.txt", (["env", "GLOB"], "*.txt")),
        ("env.FMT=%s,*x", (["env", "FMT"], "%s,*x")),
        ("env.L=[1", (["env", "L"], "[1")),
        ('env.Q="a b"', (["env", "Q"], "a b")),
        ("env.V=12e", (["env", "V"], "12e")),
    ],
)
def test_set_values_are_yaml_scalars(item, expected):
    assert client.parse_override(item) == expected


@pytest.mark.parametrize("item", ["gpu_count", "=3", "resources..gpu=1"])
def test_a_malformed_set_is_refused(item):
    with pytest.raises(MlqError) as raised:
        client.parse_override(item)
    assert raised.value.detail == client.BAD_OVERRIDE.format(item=item)


@pytest.mark.parametrize("follow", ["--wait", "--follow"])
def test_a_dry_run_with_wait_is_a_usage_error(spec_file, follow):
    server = FakeServer({})
    result = run(server, "submit", str(spec_file), "--dry-run", follow)
    assert result.exit_code == 2 and "--dry-run submits nothing" in result.output
    assert server.requests == []


@pytest.mark.parametrize("command", [("submit", "SPEC"), ("schedules", "create", "-f", "SPEC")])
def test_a_malformed_set_is_a_usage_error(spec_file, command):
    """It exited 1, as a refusal; the docs say a usage error exits 2."""
    server = FakeServer({})
    args = [str(spec_file) if part == "SPEC" else part for part in command]
    result = run(server, *args, "--set", "gpu_count")
    assert result.exit_code == 2 and client.BAD_OVERRIDE.format(item="gpu_count") in result.output
    assert server.requests == []


@pytest.mark.parametrize(
    "args, message",
    [
        (["submit", "SPEC", "--set", "command.0=bash"], "command.0: command is a list, not a mapping"),
        (["submit", "SPEC", "SPEC", "--set", "command.0=bash"], "SPEC: command.0: command is a list, not a mapping"),
        (
            ["schedules", "create", "-f", "SPEC", "--set", "command.0=bash"],
            "command.0: command is a list, not a mapping",
        ),
        (["submit", "SPEC", "--set", "resources.gpu_count=[1"], "resources.gpu_count: not YAML: "),
        (["schedules", "create", "-f", "SPEC", "--set", "name=[1"], "name: not YAML: "),
        (["quota", "vision", "--set", "H100={", "--reason", "r"], "H100: not YAML: "),
    ],
)
def test_a_set_that_cannot_apply_is_a_usage_error_too(spec_file, args, message):
    """A VALUE that is not YAML, or a KEY through a value (command is a list), exited 1 as a
    refusal, where a --set without `=` exits 2: each is the command line's fault, found before
    any request."""
    server = FakeServer({})
    result = run(server, *[str(spec_file) if arg == "SPEC" else arg for arg in args])
    assert result.exit_code == 2, result.output
    assert f"Error: Invalid value for --set: {message.replace('SPEC', str(spec_file))}" in result.stderr
    assert server.requests == []


def test_strings_that_read_as_numbers_stay_strings_through_overrides_and_yaml_written():
    """`1e-5` reads as a number now (YAML 1.2, JSON): a spec's string "1e-5" copied through
    YAML, or written as YAML for the form or `-o yaml`, became one and was refused."""
    spec = {"command": ["python", "t.py", "--lr", "1e-5"], "env": {"LR": "1e-5", "SHA": "12e4", "B": "true"}}
    assert client.apply_overrides(spec, ["env.X=1e-3"]) == {**spec, "env": {**spec["env"], "X": "1e-3"}}
    text = dump_yaml({**spec, "lr": 1e-5}, sort_keys=False)
    assert read_yaml(text) == {**spec, "lr": 1e-5}
    assert "'1e-5'" in text and "'12e4'" in text


def test_overrides_apply_to_a_copy_and_cannot_pass_through_a_value():
    spec = {"resources": {"gpu_count": 1}, "command": ["x"]}
    out = client.apply_overrides(spec, ["resources.gpu_count=16", "env.A=1"], priority="P1")
    assert out == {"resources": {"gpu_count": 16}, "command": ["x"], "env": {"A": "1"}, "priority": "P1"}
    assert spec == {"resources": {"gpu_count": 1}, "command": ["x"]}
    with pytest.raises(MlqError, match="command is a list, not a mapping"):
        client.apply_overrides(spec, ["command.x=1"])


def test_submit_sends_the_yaml_as_json_with_the_overrides(spec_file):
    server = FakeServer({("POST", "/api/v1/jobs"): (201, job())})
    result = run(server, "submit", str(spec_file), "--set", "resources.gpu_count=16", "--set", "env.STEPS=5")
    assert result.exit_code == 0, result.output
    assert server.bodies("POST", "/api/v1/jobs") == [
        {
            "name": "train",
            "team": "vision",
            "command": ["python", "train.py"],
            "resources": {"gpu_count": 16},
            "env": {"STEPS": "5"},
        }
    ]
    assert server.requests[0].headers["Authorization"] == "Bearer tok"
    assert "submitted job 7 (train): PENDING" in result.output


def test_a_date_in_yaml_is_sent_as_the_text_it_is(tmp_path):
    # An unquoted date was a date object, which JSON cannot carry: a traceback.
    path = tmp_path / "job.yaml"
    path.write_text("name: 2026-12-01\nteam: vision\ncommand: [python, train.py]\nenv: {DAY: 2026-12-01}\n")
    server = FakeServer({("POST", "/api/v1/jobs"): (201, job())})
    result = run(server, "submit", str(path), "--set", "env.AT=2026-12-01T10:00:00Z")
    assert result.exit_code == 0, result.output
    [body] = server.bodies("POST", "/api/v1/jobs")
    assert (body["name"], body["env"]) == ("2026-12-01", {"DAY": "2026-12-01", "AT": "2026-12-01T10:00:00Z"})


def test_on_in_yaml_is_a_key_not_a_boolean(tmp_path):
    """As docs/notifications.md writes it: YAML 1.1 made the key True ("notify.true: unknown field")."""
    path = tmp_path / "job.yaml"
    path.write_text("name: t\nteam: vision\ncommand: [x]\nnotify: {on: [failed], email: true}\nenv: {A: off}\n")
    server = FakeServer({("POST", "/api/v1/jobs"): (201, job())})
    assert run(server, "submit", str(path)).exit_code == 0
    [body] = server.bodies("POST", "/api/v1/jobs")
    assert (body["notify"], body["env"]) == ({"on": ["failed"], "email": True}, {"A": "off"})


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_learning_rate_in_a_spec_file_is_the_number_it_is(tmp_path, suffix):
    """A sweep's `1e-5` in a .json file was read as YAML 1.1: the string "1e-5", refused."""
    spec = {"name": "t", "team": "vision", "command": ["x"], "max_runtime_hours": 1e1}
    spec["sweep"] = {"method": "random", "parameters": {"lr": {"min": 1e-5, "max": 1e-2, "log": True}}}
    path = tmp_path / f"job{suffix}"
    text = json.dumps(spec)
    path.write_text(text if suffix == ".json" else text.replace('"', ""))
    server = FakeServer({("POST", "/api/v1/jobs"): (201, job())})
    assert run(server, "submit", str(path)).exit_code == 0
    [body] = server.bodies("POST", "/api/v1/jobs")
    assert (body["sweep"]["parameters"]["lr"], body["max_runtime_hours"]) == (
        {"min": 1e-5, "max": 1e-2, "log": True},
        10.0,
    )


def test_a_json_spec_file_that_is_not_json_is_refused_by_name(tmp_path):
    path = tmp_path / "job.json"
    path.write_text("name: train\n")  # YAML, not JSON
    server = FakeServer({})
    result = run(server, "submit", str(path))
    assert result.exit_code == EXIT_REFUSED
    assert result.stderr.startswith(f"{path}: not JSON: Expecting value: line 1 column 1")
    assert server.requests == []


def test_a_spec_file_that_is_not_utf8_is_refused_without_a_traceback(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_bytes("# café\nname: train\n".encode("latin-1"))
    server = FakeServer({})
    result = run(server, "submit", str(path))
    assert result.exit_code == EXIT_REFUSED
    assert result.stderr.splitlines() == [f"{path}: not UTF-8 text (byte 5): save it as UTF-8"]
    assert server.requests == []


# --- errors and exit codes -------------------------------------------------------------------


def test_a_refused_submit_prints_the_detail_and_each_field_and_exits_1(spec_file):
    refusal = {
        "detail": "resources.gpu_count: asks 4096 H100; the cluster has 128",
        "fields": {"resources.gpu_count": ["asks 4096 H100; the cluster has 128"], "name": ["too long"]},
    }
    server = FakeServer({("POST", "/api/v1/jobs"): (400, refusal)})
    result = run(server, "submit", str(spec_file))
    assert result.exit_code == EXIT_REFUSED
    assert result.stderr.splitlines() == ["resources.gpu_count: asks 4096 H100; the cluster has 128", "name: too long"]


def test_usage_errors_exit_2(spec_file):
    server = FakeServer({})
    assert run(server, "queue", "-o", "xml").exit_code == 2
    assert run(server, "cancel").exit_code == 2
    assert run(server, "status", "not-a-number").exit_code == 2
    assert run(server, "quota", "vision", "--set", "H100=4").exit_code == 2
    assert run(server, "nosuchverb").exit_code == 2
    assert server.requests == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "resources.gpu_count=.nan"], "resources.gpu_count: must be a finite number, not nan"),
        (["--set", "max_runtime_hours=.inf"], "max_runtime_hours: must be a finite number, not inf"),
        (["--set", "sweep.parameters.lr=-.inf"], "sweep.parameters.lr: must be a finite number, not -inf"),
    ],
)
def test_a_value_json_cannot_carry_is_refused_naming_it_before_any_request(spec_file, args, message):
    server = FakeServer({})
    result = run(server, "submit", str(spec_file), *args)
    assert result.exit_code == EXIT_REFUSED
    assert result.stderr.splitlines() == [message]
    assert server.requests == []


def test_non_finite_hours_and_limits_are_refused_without_a_traceback():
    server = FakeServer({})
    window = ["maintenance", "create", "--rack", "z1-r3", "--at", "2026-12-12T02:00Z", "--reason", "x", "--hours"]
    for args, message in (
        ([*window, "nan"], "--hours: must be a finite number, not nan"),
        ([*window, "inf"], "--hours: must be a finite number, not inf"),
        (["set", "21", "--max-runtime-hours", "nan"], "max_runtime_hours: must be a finite number, not nan"),
    ):
        result = run(server, *args)
        assert (result.exit_code, result.stderr.splitlines()) == (EXIT_REFUSED, [message])
    assert server.requests == []


@pytest.mark.parametrize("since", ["999999999d", "9999999w"])
def test_a_since_before_the_year_one_is_a_usage_error(since):
    server = FakeServer({})
    result = run(server, "jobs", "--since", since)
    assert result.exit_code == 2
    assert f"{since} ago is before the year 1" in result.output + result.stderr
    assert server.requests == []


def test_a_members_refused_quota_edit_shows_the_apis_message():
    message = "only a lead of vision or an admin may change its quotas"
    server = FakeServer({("PATCH", "/api/v1/teams/vision/quotas"): (403, {"detail": message})})
    result = run(server, "quota", "vision", "--set", "H100=64", "--set", "H100.borrowing_limit=80", "--reason", "more")
    assert result.exit_code == 1
    assert result.stderr.strip() == message
    assert server.bodies("PATCH", "/api/v1/teams/vision/quotas") == [
        {"quotas": {"gpu:H100": {"guaranteed": 64, "borrowing_limit": 80}}, "reason": "more"}
    ]


def test_a_server_that_answers_no_json_still_gives_a_clean_refusal():
    server = FakeServer({("GET", "/api/v1/teams"): lambda request: (502, None)})
    result = run(server, "teams")
    assert result.exit_code == 1
    assert result.stderr.startswith("502")


# --- -o json / yaml --------------------------------------------------------------------------


QUEUE = {
    "count": 2,
    "offset": 0,
    "results": [
        {**job(1), "position": 1, "pending_reason": {"code": "NO_FIT", "message": "no node has 8 free"}, "x": 1},
        {**job(2, owner="bob"), "owner": "bob", "position": 2, "pending_reason": None, "reserved_nodes": ["n1"]},
    ],
}


def test_queue_json_and_yaml_are_the_apis_rows_as_they_came():
    server = FakeServer({("GET", "/api/v1/queue"): (200, QUEUE)})
    as_json = run(server, "queue", "-o", "json")
    assert as_json.exit_code == 0
    assert json.loads(as_json.output) == QUEUE["results"]
    as_yaml = run(server, "queue", "-o", "yaml")
    assert yaml.safe_load(as_yaml.output) == QUEUE["results"]


@pytest.mark.parametrize("verb", ["queue", "jobs"])
def test_mine_asks_the_server_for_me_with_only_a_server_and_a_token(verb):
    """--mine wanted a user name (MLQ_USER, or `mlq login`'s) and refused with only MLQ_SERVER and
    MLQ_TOKEN, the documented setup; the server knows whose the token is."""
    server = FakeServer({("GET", "/api/v1/queue"): (200, QUEUE), ("GET", "/api/v1/jobs"): (200, {"results": []})})
    mine = run(server, verb, "--mine", "-o", "json", user="")
    assert mine.exit_code == 0, mine.output
    assert [request.url.params["owner"] for request in server.requests] == ["me"]
    assert run(server, verb, "-o", "json").exit_code == 0 and "owner" not in server.requests[-1].url.params


def test_queue_table_shows_position_and_reason():
    server = FakeServer({("GET", "/api/v1/queue"): (200, QUEUE)})
    result = run(server, "queue")
    assert result.exit_code == 0
    assert "POS" in result.output and "no node has 8 free" in result.output
    assert "RESERVED" not in result.output
    assert "RESERVED" in run(server, "queue", "-o", "wide").output


def test_jobs_follows_the_cursor_and_passes_filters():
    first = {"next": f"{SERVER}/api/v1/jobs?cursor=abc&limit=50", "previous": None, "results": [job(3)]}
    second = {"next": None, "previous": None, "results": [job(2)]}
    server = FakeServer(
        {("GET", "/api/v1/jobs"): lambda request: (200, second if request.url.params.get("cursor") else first)}
    )
    result = run(server, "jobs", "--state", "failed", "--since", "7d", "--mine", "-o", "json")
    assert result.exit_code == 0, result.output
    assert [row["id"] for row in json.loads(result.output)] == [3, 2]
    params = server.requests[0].url.params
    assert params["state"] == "FAILED" and params["owner"] == "me" and "submitted_after" in params


def test_jobs_state_takes_every_state_the_api_filters_on():
    """--state took six of the nine: `--state early_stopped` (a sweep's trials) and `skipped` (a
    pipeline's steps) were refused as invalid choices, which the API's ?state= accepts."""
    from scheduling.states import JobState  # Django's enum alone: no settings, no database

    assert client.JOB_STATES == tuple(JobState.values)
    server = FakeServer({("GET", "/api/v1/jobs"): (200, {"results": []})})
    for state in ("early_stopped", "SKIPPED", "preempted"):
        assert run(server, "jobs", "--state", state).exit_code == 0
    assert [request.url.params["state"] for request in server.requests] == ["EARLY_STOPPED", "SKIPPED", "PREEMPTED"]


def test_why_and_dry_run_print_the_suggestions():
    answer = {
        "job_id": 7,
        "state": "PENDING",
        "reason": {"code": "NEVER_FITS", "message": "asks 16 H100 per node; nodes have 8"},
        "histogram": {"too few GPUs": 12},
        "reservation": None,
        "latest_start": None,
        "likely_start": None,
        "suggestions": ["ask for 8 GPUs per task"],
    }
    server = FakeServer({("GET", "/api/v1/jobs/7/why"): (200, answer)})
    result = run(server, "why", "7")
    assert result.exit_code == 0
    assert "asks 16 H100 per node" in result.output and "- ask for 8 GPUs per task" in result.output
    assert json.loads(run(server, "why", "7", "-o", "json").output) == answer
    assert client.Why.from_json(answer).suggestions == ["ask for 8 GPUs per task"]
    group = {**answer, "child_id": 9, "reason": {"code": "QUOTA", "message": "element 0: at its borrowing limit"}}
    server = FakeServer({("GET", "/api/v1/jobs/7/why"): (200, group)})
    assert run(server, "why", "7").output.splitlines()[:2] == [
        "job 7: PENDING (as its first waiting child, job 9)",
        "reason: element 0: at its borrowing limit",
    ]


def test_tokens_list_create_revoke():
    row = {"id": 4, "name": "ci", "hint": "ab12", "created_at": "t", "last_used_at": None, "expires_at": None}
    server = FakeServer(
        {
            ("GET", "/api/v1/tokens"): (200, [row]),
            ("POST", "/api/v1/tokens"): (201, {**row, "token": "secret-value"}),
            ("DELETE", "/api/v1/tokens/4"): (204, None),
        }
    )
    assert json.loads(run(server, "tokens", "-o", "json").output) == [row]
    created = run(server, "tokens", "create", "ci", "--expires-in-days", "30")
    assert created.stdout.strip() == "secret-value"
    assert server.bodies("POST", "/api/v1/tokens") == [{"name": "ci", "expires_in_days": 30}]
    assert run(server, "tokens", "revoke", "4").exit_code == 0


def test_bulk_cancel_by_filter_and_by_ids():
    server = FakeServer({("POST", "/api/v1/jobs/cancel"): (200, {"cancelled": [1, 2], "skipped": []})})
    assert run(server, "cancel", "--mine", "--state", "pending").exit_code == 0
    assert run(server, "cancel", "1", "2", "--reason", "r").exit_code == 0
    assert server.bodies("POST", "/api/v1/jobs/cancel") == [
        {"filter": {"owner": "me", "state": "PENDING"}},
        {"ids": [1, 2], "reason": "r"},
    ]


# --- --wait and logs -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "states, code",
    [
        (["RUNNING", "SUCCEEDED"], 0),
        (["RUNNING", "FAILED", "FAILED"], 1),  # FAILED without a verdict may still be retried
        (["PENDING", "CANCELLED"], 3),
        (["RUNNING", "EARLY_STOPPED"], 3),  # a sweep's trial: over, it did not hang the wait
        (["PENDING", "SKIPPED"], 3),  # a pipeline's step whose condition did not hold
    ],
)
def test_submit_wait_exits_with_the_jobs_outcome(spec_file, states, code):
    answers = iter(states)
    seen = []

    def detail_tracking(request):
        state = next(answers)
        seen.append(state)
        verdict = "USER" if state == "FAILED" and seen.count("FAILED") == 2 else ""
        return 200, job(state=state, failure_class=verdict)

    server = FakeServer({("POST", "/api/v1/jobs"): (201, job()), ("GET", "/api/v1/jobs/7"): detail_tracking})
    result = run(server, "submit", str(spec_file), "--wait")
    assert result.exit_code == code, result.output
    assert seen == states


def test_wait_times_out_with_a_refusal(monkeypatch):
    server = FakeServer({("GET", "/api/v1/jobs/7"): (200, job(state="RUNNING"))})
    clock = iter(range(0, 100, 10))
    monkeypatch.setattr(sdk_module.time, "monotonic", lambda: next(clock))
    with pytest.raises(MlqError, match="job 7 still RUNNING after 15 s"):
        sdk(server).wait(7, timeout=15)


def test_logs_follow_polls_from_the_offset_until_the_job_ends():
    text = "step 1\nstep 2\nstep 3\ndone"
    reads = iter([(0, 7), (7, 7), (7, 14), (14, 14), (14, len(text)), (len(text), len(text))])
    states = iter(["RUNNING", "SUCCEEDED"])

    def log(request):
        start, end = next(reads)
        assert int(request.url.params["offset"]) == start
        return 200, {"attempt": 1, "next_offset": end, "text": text[start:end]}

    server = FakeServer(
        {("GET", "/api/v1/jobs/7/logs"): log, ("GET", "/api/v1/jobs/7"): lambda r: (200, job(state=next(states)))}
    )
    result = run(server, "logs", "7", "-f", "--rank", "1", "--stderr")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == ["step 1", "step 2", "step 3", "done"]
    logs = [r for r in server.requests if r.url.path.endswith("/logs")]
    assert {r.url.params["rank"] for r in logs} == {"1"} and {r.url.params["stream"] for r in logs} == {"stderr"}
    assert [r.url.params.get("attempt") for r in logs][1:] == ["1"] * (len(logs) - 1)


def test_logs_without_follow_reads_once():
    server = FakeServer({("GET", "/api/v1/jobs/7/logs"): (200, {"attempt": 1, "next_offset": 4, "text": "a\nb\n"})})
    result = run(server, "logs", "7")
    assert result.output.splitlines() == ["a", "b"]
    assert len(server.requests) == 1


def test_logs_o_json_is_a_json_line_per_log_line_with_its_attempt():
    """The README says every verb that prints data takes -o; `mlq logs -o json` was no such option.
    A line each (JSON Lines), not one document, so that -f prints them as they arrive."""
    server = FakeServer({("GET", "/api/v1/jobs/7/logs"): (200, {"attempt": 2, "next_offset": 4, "text": "a\nb\n"})})
    result = run(server, "logs", "7", "--rank", "1", "--stderr", "-o", "json")
    assert result.exit_code == 0, result.output
    row = {"job_id": 7, "rank": 1, "attempt": 2, "stream": "stderr"}
    assert [json.loads(line) for line in result.output.splitlines()] == [{**row, "line": "a"}, {**row, "line": "b"}]
    assert run(server, "logs", "7", "-o", "yaml").exit_code == 2


# --- help and completion ---------------------------------------------------------------------


def test_every_verb_has_an_example_in_its_help():
    def walk(group, prefix):
        for name, command in group.commands.items():
            yield [*prefix, name], command
            if hasattr(command, "commands"):
                yield from walk(command, [*prefix, name])

    assert "Example" in CliRunner().invoke(cli.main, ["--help"]).output
    for path, _ in walk(cli.main, []):
        shown = CliRunner().invoke(cli.main, [*path, "--help"])
        assert shown.exit_code == 0 and "Example:" in shown.output, path


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts(shell):
    result = CliRunner().invoke(cli.main, ["completion", shell])
    assert result.exit_code == 0 and "_MLQ_COMPLETE" in result.output


# --- no Django -------------------------------------------------------------------------------

SERVER_ONLY = ("django", "rest_framework", "channels", "celery", "redis", "psycopg", "scheduling", "teams", "agents")
IMPORT_THE_CLI = """
import json, sys
sys.path.insert(0, {root!r})
import mlqueue.client, mlqueue.cli
print(json.dumps({{"file": mlqueue.cli.__file__, "loaded": sorted(sys.modules)}}))
"""


def test_the_sdk_and_the_cli_load_nothing_of_the_server():
    ran = subprocess.run(
        [sys.executable, "-I", "-c", IMPORT_THE_CLI.format(root=str(ROOT))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    found = json.loads(ran.stdout)
    assert Path(found["file"]) == ROOT / "mlqueue" / "cli" / "__init__.py"
    server = [name for name in found["loaded"] if name.split(".")[0] in SERVER_ONLY]
    assert server == [], f"mlqueue.client/cli loaded server modules: {', '.join(server)}"
    ours = [name for name in found["loaded"] if name.startswith("mlqueue.")]
    assert [name for name in ours if name.split(".")[1] not in ("cli", "client")] == [], ours
    assert {"mlqueue.cli", "mlqueue.client"} <= set(ours)


def test_cancelling_one_running_job_says_the_cancel_is_requested():
    server = FakeServer(
        {
            ("GET", "/api/v1/jobs/7"): (200, job(state="RUNNING")),
            ("POST", "/api/v1/jobs/7/cancel"): (200, job(state="RUNNING", cancel_requested_at="t")),
            ("GET", "/api/v1/jobs/8"): (200, job(8, state="PENDING")),
            ("POST", "/api/v1/jobs/8/cancel"): (200, job(8, state="CANCELLED")),
        }
    )
    assert run(server, "cancel", "7", "--reason", "r").output.strip() == (
        "job 7: cancel requested; RUNNING until its tasks stop"
    )
    assert run(server, "cancel", "8").output.strip() == "job 8 cancelled"
    assert server.bodies("POST", "/api/v1/jobs/7/cancel") == [{"reason": "r"}]


def test_logs_follow_moves_on_to_a_retrys_new_attempt():
    logs = {1: "first try\n", 2: "second try\n"}
    details = iter(
        [
            job(state="RUNNING", tasks=[{"rank": 0, "state": "RUNNING", "attempt": 2}]),
            job(state="SUCCEEDED", tasks=[{"rank": 0, "state": "SUCCEEDED", "attempt": 2}]),
        ]
    )

    def log(request):
        attempt, offset = int(request.url.params.get("attempt", 1)), int(request.url.params["offset"])
        return 200, {"attempt": attempt, "next_offset": len(logs[attempt]), "text": logs[attempt][offset:]}

    server = FakeServer(
        {("GET", "/api/v1/jobs/7/logs"): log, ("GET", "/api/v1/jobs/7"): lambda request: (200, next(details))}
    )
    assert list(sdk(server).logs(7, follow=True)) == ["first try", "second try"]
    pinned = FakeServer(
        {
            ("GET", "/api/v1/jobs/7/logs"): log,
            ("GET", "/api/v1/jobs/7"): (200, job(state="SUCCEEDED", tasks=[{"rank": 0, "state": "S", "attempt": 2}])),
        }
    )
    assert list(sdk(pinned).logs(7, attempt=1, follow=True)) == ["first try"]


def sse(*events: tuple[str, dict], comment: bool = True) -> httpx.Response:
    body = ": keep-alive\n\n" if comment else ""
    for name, data in events:
        body += f"id: {data.get('next_offset', 0)}\nevent: {name}\ndata: {json.dumps(data)}\n\n"
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, text=body)


def test_server_sent_events_are_parsed_line_by_line():
    lines = ["retry: 2000", "", ": keep-alive", "", "id: 3", "event: log", "data: a", "data:b", "", "data: plain", ""]
    assert list(client.server_sent_events([*lines, "event: cut", "data: off"])) == [
        ("log", "a\nb"),
        ("message", "plain"),
    ]


def test_logs_follow_reads_the_stream_resumes_where_it_closed_and_moves_on_to_a_retry():
    answers = iter(
        [
            # attempt 1, then the stream closes at the server's bound: the client resumes from offset 6
            sse(("log", {"attempt": 1, "offset": 0, "next_offset": 6, "text": "first\npar"})),
            sse(
                ("log", {"attempt": 1, "offset": 6, "next_offset": 11, "text": "tial\n"}),
                ("end", {"attempt": 1, "next_offset": 11, "state": "FAILED"}),
            ),
            sse(
                ("log", {"attempt": 2, "offset": 0, "next_offset": 7, "text": "second"}),
                ("end", {"attempt": 2, "next_offset": 7, "state": "SUCCEEDED"}),
            ),
        ]
    )
    details = iter(
        [
            job(state="RUNNING", tasks=[{"rank": 0, "state": "FAILED", "attempt": 1}]),
            job(state="RUNNING", tasks=[{"rank": 0, "state": "RUNNING", "attempt": 2}]),
            job(state="SUCCEEDED", tasks=[{"rank": 0, "state": "SUCCEEDED", "attempt": 2}]),
        ]
    )
    server = FakeServer(
        {
            ("GET", "/api/v1/jobs/7/logs"): lambda r: next(answers),
            ("GET", "/api/v1/jobs/7"): lambda r: (200, next(details)),
        }
    )
    assert list(sdk(server).logs(7, follow=True, poll=0)) == ["first", "partial", "second"]
    logs = [r for r in server.requests if r.url.path.endswith("/logs")]
    assert [dict(r.url.params) for r in logs] == [
        {"rank": "0", "stream": "stdout", "offset": "0", "follow": "1"},
        {"rank": "0", "stream": "stdout", "offset": "6", "follow": "1", "attempt": "1"},
        {"rank": "0", "stream": "stdout", "offset": "0", "follow": "1", "attempt": "2"},
    ]
    assert {r.headers["accept"] for r in logs} == {"text/event-stream"}


def test_logs_follow_o_json_tells_a_retrys_lines_by_their_attempt():
    answers = iter(
        [
            sse(("log", {"attempt": 1, "offset": 0, "next_offset": 6, "text": "first\n"}), ("end", {"attempt": 1})),
            sse(("log", {"attempt": 2, "offset": 0, "next_offset": 7, "text": "second"}), ("end", {"attempt": 2})),
        ]
    )
    details = iter(
        [
            job(state="RUNNING", tasks=[{"rank": 0, "state": "RUNNING", "attempt": 2}]),
            job(state="SUCCEEDED", tasks=[{"rank": 0, "state": "SUCCEEDED", "attempt": 2}]),
        ]
    )
    server = FakeServer(
        {
            ("GET", "/api/v1/jobs/7/logs"): lambda r: next(answers),
            ("GET", "/api/v1/jobs/7"): lambda r: (200, next(details)),
        }
    )
    result = run(server, "logs", "7", "-f", "-o", "json")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert [(row["attempt"], row["line"]) for row in rows] == [(1, "first"), (2, "second")]


def test_logs_follow_stops_at_the_end_of_a_pinned_attempt_and_refusals_are_errors():
    server = FakeServer(
        {("GET", "/api/v1/jobs/7/logs"): sse(("end", {"attempt": 1, "next_offset": 0, "state": "RUNNING"}))}
    )
    assert list(sdk(server).logs(7, attempt=1, follow=True)) == []
    assert [r.url.path for r in server.requests] == ["/api/v1/jobs/7/logs"]
    refused = FakeServer({("GET", "/api/v1/jobs/7/logs"): (400, {"detail": "offset: bad", "fields": {}})})
    with pytest.raises(MlqError, match="offset: bad"):
        list(sdk(refused).logs(7, follow=True))


def test_the_config_files_user_goes_with_its_token_only(monkeypatch):
    client.write_config("http://x", "file-token", "ada")
    assert Client().user == "ada"
    assert Client(token="another").user == ""
    monkeypatch.setenv("MLQ_TOKEN", "env-token")
    assert Client().user == ""
    monkeypatch.setenv("MLQ_USER", "bob")
    assert Client().user == "bob"


def test_a_spec_or_a_value_that_is_not_yaml_is_refused_by_name(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    server = FakeServer({})
    result = run(server, "submit", str(broken))
    assert result.exit_code == 1 and result.stderr.startswith(f"{broken}: not YAML: ")
    listed = tmp_path / "ok.yaml"
    listed.write_text("name: x\n")
    result = run(server, "submit", str(listed), "--set", "resources.gpu_count=[1,")
    assert result.exit_code == 2 and "Error: Invalid value for --set: resources.gpu_count: not YAML: " in result.stderr
    listed = tmp_path / "list.yaml"
    listed.write_text("- 1\n")
    assert run(server, "submit", str(listed)).stderr.strip() == client.NOT_A_MAPPING.format(where=listed, kind="list")
    assert server.requests == []


def test_an_empty_spec_file_is_refused_not_submitted_as_nothing(tmp_path):
    """An empty .jsonl submitted nothing and exited 0, as if it had worked."""
    server = FakeServer({})
    empty = tmp_path / "runs.jsonl"
    empty.write_text("\n  \n")
    result = run(server, "submit", str(empty))
    assert (result.exit_code, result.stderr) == (
        1,
        f"{empty}: empty: a job spec is a mapping of fields, one per line in a JSON Lines file\n",
    )
    blank = tmp_path / "job.yaml"
    blank.write_text("# nothing yet\n")
    result = run(server, "submit", str(blank))
    assert (result.exit_code, result.stderr) == (1, f"{blank}: empty: a job spec is a mapping of fields\n")
    assert server.requests == []


def test_dry_run_set_events_nodes_and_cordon(spec_file):
    node = {"name": "gpu-017", "state": "READY", "admin_state": "CORDONED", "gpu_type": "H100", "gpu_count": 8}
    verdict = {
        "valid": True,
        "can_ever_run": False,
        "placement": None,
        "reason": "needs 16 per node",
        "suggestions": [],
    }
    server = FakeServer(
        {
            ("POST", "/api/v1/jobs/dry-run"): (200, verdict),
            ("PATCH", "/api/v1/jobs/7"): (200, job(priority="P1")),
            ("GET", "/api/v1/jobs/7/events"): (200, {"next": None, "results": [{"id": 1, "kind": "SUBMITTED"}]}),
            ("GET", "/api/v1/nodes"): (200, {"next": None, "results": [node]}),
            ("POST", "/api/v1/nodes/gpu-017/cordon"): (200, node),
        }
    )
    dry = run(server, "submit", str(spec_file), "--dry-run", "--set", "resources.gpu_count=16")
    assert dry.exit_code == 1 and "reason: needs 16 per node" in dry.output  # it can never run: exit 1
    assert [r.url.path for r in server.requests] == ["/api/v1/jobs/dry-run"]  # nothing submitted
    assert json.loads(run(server, "set", "7", "--priority", "P1", "-o", "json").output)["priority"] == "P1"
    assert server.bodies("PATCH", "/api/v1/jobs/7") == [{"priority": "P1"}]
    assert run(server, "set", "7").exit_code == 2
    assert "SUBMITTED" in run(server, "events", "7").output
    assert json.loads(run(server, "nodes", "--rack", "r1", "-o", "json").output) == [node]
    assert server.requests[-1].url.params["rack"] == "r1"
    assert run(server, "cordon", "gpu-017").exit_code == 2  # --reason is required
    assert "CORDONED" in run(server, "cordon", "gpu-017", "--reason", "flaky").output
    assert server.bodies("POST", "/api/v1/nodes/gpu-017/cordon") == [{"reason": "flaky"}]


def test_drain_may_wait_and_nodes_filter_by_several_states():
    """`mlq drain` had no --wait, and a second --state replaced the first."""
    node = {"name": "gpu-017", "state": "DRAINING", "gpu_type": "H100", "gpu_count": 8}
    server = FakeServer(
        {
            ("POST", "/api/v1/nodes/gpu-017/drain"): (200, node),
            ("GET", "/api/v1/nodes"): (200, {"next": None, "results": [node]}),
        }
    )
    assert run(server, "drain", "gpu-017", "--reason", "firmware", "--wait").exit_code == 0
    assert run(server, "drain", "gpu-017", "--reason", "now").exit_code == 0
    assert server.bodies("POST", "/api/v1/nodes/gpu-017/drain") == [
        {"reason": "firmware", "wait": True},
        {"reason": "now"},
    ]
    assert run(server, "nodes", "--state", "READY", "--state", "LOST").exit_code == 0
    assert server.requests[-1].url.params.get_list("state") == ["READY", "LOST"]
    # The next page keeps both (only the first was kept).
    pages = iter([{"next": "http://mlq.test/api/v1/nodes?cursor=c2&state=READY&state=LOST", "results": [node]}])
    server.routes["GET", "/api/v1/nodes"] = lambda request: (200, next(pages, {"next": None, "results": []}))
    assert run(server, "nodes", "--state", "READY", "--state", "LOST").exit_code == 0
    assert server.requests[-1].url.params.get_list("state") == ["READY", "LOST"]
    assert server.requests[-1].url.params["cursor"] == "c2"
    run(server, "nodes")
    assert "state" not in server.requests[-1].url.params


def test_include_gpus_puts_excluded_gpus_back():
    node = {"name": "gpu-017", "state": "READY", "gpu_type": "H100", "gpu_count": 8, "excluded_gpus": {}}
    server = FakeServer({("POST", "/api/v1/nodes/gpu-017/include-gpus"): (200, node)})
    assert run(server, "include-gpus", "gpu-017", "--gpu", "3").exit_code == 2  # --reason is required
    assert run(server, "include-gpus", "gpu-017", "--gpu", "16", "--reason", "x").exit_code == 2
    shown = run(server, "include-gpus", "gpu-017", "--gpu", "3", "--gpu", "5", "--reason", "swapped", "-o", "wide")
    assert shown.exit_code == 0 and "EXCLUDED" in shown.output
    run(server, "include-gpus", "gpu-017", "--reason", "all back")
    assert server.bodies("POST", "/api/v1/nodes/gpu-017/include-gpus") == [
        {"reason": "swapped", "gpus": [3, 5]},
        {"reason": "all back"},
    ]
    # QA: the row alone did not say which GPUs went back.
    told = run(server, "include-gpus", "gpu-017", "--gpu", "5", "--gpu", "3", "--reason", "swapped")
    assert "gpu-017: put back 3, 5; still excluded: none" in told.output


def test_a_dry_run_that_would_place_names_the_nodes(spec_file):
    placed = {"nodes": [{"node": "z1-r1-h100-01", "tasks": 1}, {"node": "z1-r1-h100-02", "tasks": 2}]}
    verdict = {"valid": True, "can_ever_run": True, "placement": placed, "reason": None, "suggestions": []}
    server = FakeServer({("POST", "/api/v1/jobs/dry-run"): (200, verdict)})
    dry = run(server, "submit", str(spec_file), "--dry-run")
    assert dry.exit_code == 0
    assert "would go to: z1-r1-h100-01 (1 task), z1-r1-h100-02 (2 tasks)" in dry.output


def test_hold_release_and_requeue():
    server = FakeServer(
        {
            ("POST", "/api/v1/jobs/7/hold"): (200, job(held=True, held_by_name="ada", held_reason="data")),
            ("POST", "/api/v1/jobs/7/release"): (200, job(held=False)),
            ("POST", "/api/v1/jobs/8/requeue"): (200, job(8, state="RUNNING")),
        }
    )
    assert run(server, "hold", "7", "--reason", "data").output.strip() == "job 7 held by ada"
    held = FakeServer({("POST", "/api/v1/jobs/7/hold"): (200, job(held=True, held_by_name="ada", held_reason="data"))})
    # Held already, for another reason: the hold changed nothing (it said "held by ada", QA).
    again = run(held, "hold", "7", "--reason", "second").output.strip()
    assert again == "job 7 was already held by ada (data): nothing changed"
    assert run(held, "hold", "7", "--reason", "data").output.strip() == "job 7 held by ada"
    assert run(server, "release", "7").output.strip() == "job 7 released"
    assert run(server, "requeue", "8").output.strip() == "job 8: requeue requested; RUNNING until its tasks stop"
    assert server.bodies("POST", "/api/v1/jobs/7/hold") == [{"reason": "data"}]
    assert server.bodies("POST", "/api/v1/jobs/8/requeue") == [{}]
    assert json.loads(run(server, "hold", "7", "-o", "json").output)["id"] == 7


def test_a_refused_hold_shows_the_apis_message():
    message = "job 7 is RUNNING: only a PENDING job can be held."
    server = FakeServer({("POST", "/api/v1/jobs/7/hold"): (409, {"detail": message})})
    result = run(server, "hold", "7")
    assert result.exit_code == 1
    assert result.stderr.strip() == message


# --- configuration a user got wrong: a message, never a traceback --------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('server = "http://x\n', "not a config file (Illegal character"),
        ("server = 5\n", "server must be text in quotes, not int"),
        ('token = ["a"]\n', "token must be text in quotes, not list"),
    ],
)
def test_a_broken_config_file_is_named_not_a_traceback(tmp_path, text, expected):
    path = tmp_path / "config" / "mlqueue" / "config.toml"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(MlqError) as raised:
        Client()
    assert raised.value.detail.startswith(f"{path}: {expected}")


@pytest.mark.parametrize(
    ("server", "token", "expected"),
    [
        ("http://[::1", "tok", "the server 'http://[::1' is not a URL"),
        (SERVER, "mlq_\u00e9", "the token (MLQ_TOKEN, token= or the config file) holds characters no token has"),
        (SERVER, "mlq_\x00", "the token (MLQ_TOKEN, token= or the config file) holds characters no token has"),
    ],
)
def test_a_bad_server_or_token_is_named_not_a_traceback(server, token, expected):
    fake = FakeServer({("GET", "/api/v1/queue"): (200, [])})
    with pytest.raises(MlqError) as raised:
        Client(server=server, token=token, transport=httpx.MockTransport(fake)).request("GET", "/queue")
    assert raised.value.detail.startswith(expected)
    assert fake.requests == []


def test_a_server_address_that_is_not_the_sites_root_says_so():
    page = httpx.Response(404, text="<!DOCTYPE html><html>Not Found</html>", headers={"content-type": "text/html"})
    fake = FakeServer({("GET", "/api/v1/api/v1/queue"): page})
    made = Client(server=f"{SERVER}/api/v1", token="tok", transport=httpx.MockTransport(fake))
    with pytest.raises(MlqError) as raised:
        made.request("GET", "/queue")
    assert raised.value.detail == sdk_module.NOT_THE_API.format(status=404, server=f"{SERVER}/api/v1")


def test_node_and_window_states_are_taken_in_any_case():
    """QA: `mlq nodes --state cordoned` went to the server as typed and was refused (exit 1);
    `mlq maintenance list --state done` was a usage error (exit 2)."""
    from scheduling.core.model import NodeState

    assert client.NODE_STATES == tuple(NodeState)
    server = FakeServer({("GET", "/api/v1/nodes"): (200, []), ("GET", "/api/v1/maintenance"): (200, [])})
    assert run(server, "nodes", "--state", "cordoned", "--state", "Draining").exit_code == 0
    assert server.requests[0].url.params.get_list("state") == ["CORDONED", "DRAINING"]
    assert run(server, "maintenance", "list", "--state", "done").exit_code == 0
    assert server.requests[1].url.params["state"] == "DONE"
    assert run(server, "nodes", "--state", "gone").exit_code == 2


def test_a_secret_override_is_taken_as_written_and_never_repeated_in_an_error():
    """QA: `--set 'secret_env.X=*TOKEN'` failed as a YAML alias and echoed the token."""
    from mlqueue.client.specs import apply_overrides

    spec = apply_overrides({}, ["secret_env.HF_TOKEN=*hf_abc", "secret_env.PIN=0123", "env.N=16"])
    assert spec == {"secret_env": {"HF_TOKEN": "*hf_abc", "PIN": "0123"}, "env": {"N": "16"}}
    with pytest.raises(client.MlqError) as refused:
        apply_overrides({}, ["secret_env..X=hf_abc"])
    assert "hf_abc" not in str(refused.value)


def test_cancelling_a_job_already_cancelled_says_so_and_exits_1():
    """QA: 'job 13 cancelled', exit 0, for a job cancelled long before (the bulk form and an
    ended job's 409 both say nothing was cancelled, and exit 1)."""
    server = FakeServer({("GET", "/api/v1/jobs/13"): (200, job(13, state="CANCELLED"))})
    result = run(server, "cancel", "13")
    assert (result.exit_code, result.stdout, result.stderr) == (
        1,
        "",
        "job 13 already ended CANCELLED; there is nothing to cancel.\n",
    )
    assert server.bodies("POST", "/api/v1/jobs/13/cancel") == []
