"""QA's mlq and SDK defects against a fake server (httpx.MockTransport): a redirect or an empty
answer is a clear refusal, not an AttributeError; a slow server is told from one never reached;
--array lowers the file's max_failures below its new elements; a replayed submit or create says
so; a refused batch's field errors print once; a sweep's parameters print as the trial gets them."""

import httpx
import pytest
from click.testing import CliRunner

from mlqueue import cli
from mlqueue.cli import groups
from mlqueue.cli.app import EXIT_REFUSED
from mlqueue.client import Client, MlqError
from mlqueue.client.answers import REDIRECTED, TIMED_OUT, UNREACHABLE
from tests.unit.test_cli import SERVER, FakeServer, clean_environment, job, run, sdk  # noqa: F401
from tests.unit.test_cli_groups import ARRAY_PARENT

SCHEDULE = {
    "id": 18,
    "name": "nightly",
    "team": "vision",
    "cron": "0 3 * * *",
    "timezone": "Europe/Berlin",
    "next_run_local": "2026-04-21T03:00:00+02:00",
}


def redirecting(location: str | None, status: int = 301) -> httpx.MockTransport:
    headers = {"Location": location} if location else {}
    return httpx.MockTransport(lambda request: httpx.Response(status, headers=headers))


# --- a redirect, an empty answer --------------------------------------------------------------


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_names_the_sites_address_to_use_on_every_verb_login_included(status):
    transport = redirecting("https://mlq.test/api/v1/jobs/7?x=1", status)
    said = REDIRECTED.format(status=status, location="https://mlq.test")
    made = Client(SERVER, token="t", transport=transport)
    for call in (lambda: made.get(7), lambda: made.queue(), lambda: made.login("ada", "pw", save=False)):
        with pytest.raises(MlqError) as caught:
            call()
        assert (caught.value.status, caught.value.detail) == (status, said)

    def build():
        return Client(SERVER, token="t", transport=transport)

    for args in (["status", "7"], ["queue"], ["login", "--server", SERVER, "--username", "ada"]):
        result = CliRunner().invoke(cli.main, args, input="pw\n", obj={"client": build}, catch_exceptions=False)
        assert (result.exit_code, result.stderr.strip().splitlines()[-1]) == (EXIT_REFUSED, said), args


def test_a_relative_or_missing_location_is_still_a_clear_refusal():
    with pytest.raises(MlqError, match=r"^302: the server redirects to http://mlq.test/login: use that URL"):
        Client(SERVER, token="t", transport=redirecting("/login", 302)).get(7)
    with pytest.raises(MlqError, match="^301: the server redirects without saying where to"):
        Client(SERVER, token="t", transport=redirecting(None)).get(7)


def test_a_followed_log_that_redirects_is_the_same_refusal():
    made = Client(SERVER, token="t", transport=redirecting("https://mlq.test/api/v1/jobs/7/logs"))
    with pytest.raises(MlqError) as caught:
        list(made.logs(7, follow=True))
    assert caught.value.detail == REDIRECTED.format(status=301, location="https://mlq.test")


def test_an_empty_answer_where_json_is_due_is_a_refusal_not_none():
    empty = httpx.MockTransport(lambda request: httpx.Response(200))
    for call in (lambda made: made.get(7), lambda made: made.jobs(), lambda made: made.children(7)):
        with pytest.raises(MlqError, match="answered with an empty body, not the API's JSON"):
            call(Client(SERVER, token="t", transport=empty))
    no_content = FakeServer({("DELETE", "/api/v1/schedules/3"): (204, None)})
    assert sdk(no_content).delete_schedule(3) is None  # a 204 is no body, as meant


# --- a slow server, one never reached ---------------------------------------------------------


def failing(error: type[httpx.HTTPError]) -> httpx.MockTransport:
    def answer(request):
        raise error("timed out", request=request)

    return httpx.MockTransport(answer)


@pytest.mark.parametrize("error", [httpx.ReadTimeout, httpx.WriteTimeout])
def test_a_server_that_answers_too_slowly_is_said_to_be_slow(error):
    with pytest.raises(MlqError) as caught:
        Client(SERVER, token="t", transport=failing(error), timeout=12.5).get(7)
    assert caught.value.detail == TIMED_OUT.format(seconds="12.5", server=SERVER)
    assert caught.value.detail.startswith("timed out waiting for the server (12.5 s)")


@pytest.mark.parametrize("error", [httpx.ConnectTimeout, httpx.ConnectError])
def test_a_server_never_reached_is_still_cannot_reach(error):
    with pytest.raises(MlqError) as caught:
        Client(SERVER, token="t", transport=failing(error)).get(7)
    assert caught.value.detail == UNREACHABLE.format(server=SERVER, error="timed out")


# --- --array and max_failures (defect 1), --max-failures' help (defect 4) --------------------


def test_a_lone_index_lowers_the_files_max_failures_and_says_so(tmp_path):
    path = tmp_path / "infer.yaml"
    path.write_text("name: infer\ncommand: [x]\narray: {count: 200, parallelism: 16, max_failures: 5}\n")
    server = FakeServer({("POST", "/api/v1/jobs"): (201, ARRAY_PARENT)})

    lowered = run(server, "submit", str(path), "--array", "7")
    within = run(server, "submit", str(path), "--array", "0-9")
    chosen = run(server, "submit", str(path), "--array", "7", "--max-failures", "3")

    assert [result.exit_code for result in (lowered, within, chosen)] == [0, 0, 0]
    assert [body["array"] for body in server.bodies("POST", "/api/v1/jobs")] == [
        {"indices": "7", "parallelism": 16, "max_failures": 0},
        {"indices": "0-9", "parallelism": 16, "max_failures": 5},
        {"indices": "7", "parallelism": 16, "max_failures": 3},  # the flag wins: the server judges it
    ]
    assert lowered.stderr.strip() == groups.FAILURES_LOWERED.format(
        where="", indices="7", elements="1 element", kept=5, lowered=0
    )
    assert "lowered" not in within.stderr + chosen.stderr


def test_a_batch_names_the_spec_whose_max_failures_was_lowered(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text(
        '{"name": "a", "command": ["x"], "array": {"count": 8, "max_failures": 1}}\n'
        '{"name": "b", "command": ["x"], "array": {"count": 8, "max_failures": 4}}\n'
    )
    answer = {"created": 2, "existing": 0, "conflicts": 0, "jobs": []}
    server = FakeServer({("POST", "/api/v1/jobs/batch"): (201, answer)})
    assert run(server, "submit", str(path), "--array", "1,3,5").exit_code == 0
    sent = server.bodies("POST", "/api/v1/jobs/batch")[0]["jobs"]
    assert [spec["array"]["max_failures"] for spec in sent] == [1, 2]


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        ({"indices": "0-9,5-14"}, 15),  # overlapping ranges count each index once, as the server does
        ({"indices": "0-98:2"}, 50),
        ({"count": 4}, 4),
        ({"indices": "0-99999999999"}, None),  # past what is counted: the server refuses its size
    ],
)
def test_element_count_counts_as_the_server_does(block, expected):
    assert groups.element_count(block) == expected


def test_max_failures_help_says_what_a_sweep_does_without_it():
    result = run(FakeServer({}), "submit", "--help")
    assert "(default 0)" not in result.output
    assert "a sweep: default none set, it fails only when every trial fails" in " ".join(result.output.split())


# --- replays, a refused batch, sweep parameters (defect 5) ------------------------------------


def test_replayed_submits_and_schedule_creates_say_so(tmp_path):
    spec_file = tmp_path / "single.yaml"
    spec_file.write_text("name: single\nteam: vision\ncommand: [x]\n")
    replay = FakeServer({("POST", "/api/v1/jobs"): (200, job(74, "SUCCEEDED", name="single"))})
    fresh = FakeServer({("POST", "/api/v1/jobs"): (201, job(75, "PENDING", name="single"))})
    assert run(replay, "submit", str(spec_file)).output == (
        "job 74 (single) was submitted before with this spec: SUCCEEDED\n"
    )
    assert run(fresh, "submit", str(spec_file)).output == "submitted job 75 (single): PENDING\n"

    nightly = tmp_path / "nightly.yaml"
    nightly.write_text("name: nightly\nteam: vision\ncommand: [x]\nschedule: {cron: '0 3 * * *'}\n")
    answer = {"created": "schedule", "message": "", "schedule": SCHEDULE}
    existed = FakeServer({("POST", "/api/v1/jobs"): (200, answer)})
    made = FakeServer({("POST", "/api/v1/jobs"): (201, answer)})
    timing = "'0 3 * * *' in Europe/Berlin, next 2026-04-21T03:00:00+02:00"
    assert run(existed, "schedules", "create", "-f", str(nightly)).output == (
        f"schedule 18 (nightly) exists already with these settings: {timing}\n"
    )
    assert run(made, "schedules", "create", "-f", str(nightly)).output == f"created schedule 18 (nightly): {timing}\n"
    assert run(existed, "submit", str(nightly)).output == (
        f"schedule 18 (nightly) exists already with these settings: {timing} (a schedule, not a job)\n"
    )
    assert sdk(existed).submit(str(nightly)).existing and not sdk(made).create_schedule(str(nightly)).existing


def test_a_refused_batch_prints_each_field_error_once(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(f'{{"name": "n{n}", "command": ["x"]}}\n' for n in range(4)))
    message = "jobs[3].resources.gpu_count: 3 GPUs cannot be split"
    refusal = {"detail": message, "fields": {"jobs[3].resources.gpu_count": ["3 GPUs cannot be split"]}}
    result = run(FakeServer({("POST", "/api/v1/jobs/batch"): (400, refusal)}), "submit", str(path))
    assert (result.exit_code, result.stderr.splitlines()) == (EXIT_REFUSED, [f"{path}:4: {message}"])


def test_sweep_parameters_print_as_the_trial_receives_them():
    child = {"id": 9, "state": "RUNNING", "parent": 4, "trial": 2, "params": {"flag": True, "lr": 0.0001234567891}}
    server = FakeServer({("GET", "/api/v1/jobs/4/children"): (200, [child]), ("GET", "/api/v1/jobs/9"): (200, child)})
    assert "flag=true lr=0.0001234567891" in run(server, "children", "4").output
    assert run(server, "status", "9").output.strip().endswith("trial 2 of sweep job 4: flag=true lr=0.0001234567891")
