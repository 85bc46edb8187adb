"""QA's mlq and SDK defects against a fake server (httpx.MockTransport): a followed log shows a
short last attempt, Ctrl-C exits 130 naming the job, a cancel that skipped a job exits 1, a dry
run that can never run exits 1, a config file that is not UTF-8 is named, `mlq jobs` takes
several states and refuses a repeated one-value option, a piped table keeps a line per row, and
a stale forecast says so in `mlq why` and `mlq queue`."""

import json
import types

import pytest

from mlqueue.cli import app, jobs, output
from mlqueue.cli.columns import STALE_MARK
from mlqueue.client import JOB_STATES, Client, MlqError
from mlqueue.client.config import NOT_UTF8
from tests.unit.test_cli import FakeServer, clean_environment, job, run, sdk, sse  # noqa: F401 (an autouse fixture)


@pytest.fixture
def spec_file(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("name: train\nteam: vision\ncommand: [python, train.py]\nresources:\n  gpu_count: 1\n")
    return path


def tasks(attempt: int, state: str = "RUNNING") -> list[dict]:
    return [{"rank": 0, "state": state, "attempt": attempt}]


def details(*answers: dict):
    """The job's detail as each GET reads it, the last one repeated."""
    answers = list(answers)
    return lambda request: (200, answers.pop(0) if len(answers) > 1 else answers[0])


# --- 1. the last attempt of a followed log ------------------------------------------------------


def streamed_attempts(texts: dict[int, str]):
    """The log's stream: each attempt's text then its end, the attempt asked for (else the first)."""

    def answer(request):
        attempt = int(request.url.params.get("attempt", 1))
        log = {"attempt": attempt, "offset": 0, "next_offset": len(texts[attempt]), "text": texts[attempt]}
        return sse(("log", log), ("end", {"attempt": attempt, "next_offset": len(texts[attempt]), "state": "X"}))

    return answer


def test_a_streamed_follow_shows_a_last_attempt_that_ended_before_the_next_poll():
    """Attempt 2 began and succeeded between two polls: the job had finished by the poll that saw
    it, and the follow ended without it (`mlq logs N` showed it)."""
    server = FakeServer(
        {
            ("GET", "/api/v1/jobs/7/logs"): streamed_attempts({1: "attempt 1\n", 2: "attempt 2\n"}),
            ("GET", "/api/v1/jobs/7"): details(
                job(state="RUNNING", tasks=tasks(1, "FAILED")), job(state="SUCCEEDED", tasks=tasks(2, "SUCCEEDED"))
            ),
        }
    )
    assert list(sdk(server).log_lines(7, follow=True, poll=0)) == [(1, "attempt 1"), (2, "attempt 2")]


def test_a_streamed_follow_shows_every_attempt_the_job_made_after_the_one_followed():
    server = FakeServer(
        {
            ("GET", "/api/v1/jobs/7/logs"): streamed_attempts({1: "one\n", 2: "two\n", 3: "three\n"}),
            ("GET", "/api/v1/jobs/7"): details(job(state="SUCCEEDED", tasks=tasks(3, "SUCCEEDED"))),
        }
    )
    assert list(sdk(server).logs(7, follow=True, poll=0)) == ["one", "two", "three"]
    asked = [r.url.params.get("attempt") for r in server.requests if r.url.path.endswith("/logs")]
    assert asked == [None, "2", "3"]
    pinned = FakeServer(dict(server.routes))
    assert list(sdk(pinned).logs(7, attempt=1, follow=True, poll=0)) == ["one"]  # an attempt asked for alone


def test_a_polled_follow_shows_a_last_attempt_that_ended_before_the_next_poll():
    """The same where the server does not stream (a plain JSON chunk): the polling fallback."""
    texts = {1: "attempt 1\n", 2: "attempt 2\n"}

    def chunk(request):
        attempt, offset = int(request.url.params.get("attempt", 1)), int(request.url.params["offset"])
        return 200, {"attempt": attempt, "next_offset": len(texts[attempt]), "text": texts[attempt][offset:]}

    server = FakeServer(
        {
            ("GET", "/api/v1/jobs/7/logs"): chunk,
            ("GET", "/api/v1/jobs/7"): details(
                job(state="RUNNING", tasks=tasks(1)), job(state="SUCCEEDED", tasks=tasks(2, "SUCCEEDED"))
            ),
        }
    )
    assert list(sdk(server).log_lines(7, follow=True, poll=0)) == [(1, "attempt 1"), (2, "attempt 2")]


def test_submit_follow_prints_the_retrys_lines_before_the_outcome(spec_file):
    server = FakeServer(
        {
            ("POST", "/api/v1/jobs"): (201, job()),
            ("GET", "/api/v1/jobs/7/logs"): streamed_attempts({1: "attempt 1\n", 2: "attempt 2\n"}),
            ("GET", "/api/v1/jobs/7"): details(
                job(state="RUNNING", tasks=tasks(1, "FAILED")), job(state="SUCCEEDED", tasks=tasks(2, "SUCCEEDED"))
            ),
        }
    )
    result = run(server, "submit", str(spec_file), "--follow")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1:] == ["attempt 1", "attempt 2", "job 7 SUCCEEDED"]


# --- 2. Ctrl-C ------------------------------------------------------------------------------------


def interrupted_after(answers: list):
    """A route that answers with `answers` in turn, then is interrupted (the user's Ctrl-C)."""

    def answer(request):
        if not answers:
            raise KeyboardInterrupt
        return answers.pop(0)

    return answer


def test_ctrl_c_during_submit_wait_exits_130_naming_the_job_and_its_last_state(spec_file):
    """It exited 1 with `Aborted!`: 1 is what --wait exits when the job failed."""
    server = FakeServer(
        {
            ("POST", "/api/v1/jobs"): (201, job()),
            ("GET", "/api/v1/jobs/7"): interrupted_after([(200, job(state="RUNNING"))]),
        }
    )
    result = run(server, "submit", str(spec_file), "--wait")
    assert result.exit_code == app.EXIT_INTERRUPTED == 130
    assert result.stderr.strip().splitlines()[-1] == "mlq: interrupted; job 7 is still RUNNING (not cancelled)"
    assert "Aborted!" not in result.output
    assert not server.bodies("POST", "/api/v1/jobs/7/cancel")


def test_ctrl_c_before_any_read_names_the_state_the_job_was_submitted_in(spec_file):
    server = FakeServer({("POST", "/api/v1/jobs"): (201, job()), ("GET", "/api/v1/jobs/7"): interrupted_after([])})
    result = run(server, "submit", str(spec_file), "--wait")
    assert (result.exit_code, result.stderr.strip()) == (130, app.INTERRUPTED_WATCHING.format(job=7, state="PENDING"))


@pytest.mark.parametrize(
    "args, expected",
    [
        (["logs", "7", "-f"], app.INTERRUPTED_UNSEEN.format(job=7)),  # the stream alone: no state read
        (["queue"], app.INTERRUPTED),
    ],
)
def test_ctrl_c_elsewhere_exits_130_too(args, expected):
    server = FakeServer(
        {("GET", "/api/v1/jobs/7/logs"): interrupted_after([]), ("GET", "/api/v1/queue"): interrupted_after([])}
    )
    result = run(server, *args)
    assert (result.exit_code, result.stderr.strip()) == (130, expected)


def test_ctrl_c_while_following_names_the_state_last_read(spec_file):
    server = FakeServer(
        {
            ("POST", "/api/v1/jobs"): (201, job()),
            ("GET", "/api/v1/jobs/7/logs"): interrupted_after([sse(("end", {"attempt": 1, "next_offset": 0}))]),
            ("GET", "/api/v1/jobs/7"): (200, job(state="RUNNING", tasks=tasks(2))),
        }
    )
    result = run(server, "submit", str(spec_file), "--follow")
    assert (result.exit_code, result.stderr.strip()) == (130, app.INTERRUPTED_WATCHING.format(job=7, state="RUNNING"))


# --- 3. cancel ------------------------------------------------------------------------------------

SKIPPED = [
    {"id": 998, "why": "job 998 does not exist or is not visible to you."},
    {"id": 999, "why": "job 999 is already CANCELLED."},
]


@pytest.mark.parametrize(
    "answer, code",
    [
        ({"cancelled": [], "skipped": SKIPPED}, 1),
        ({"cancelled": [5], "skipped": SKIPPED[:1]}, 1),
        ({"cancelled": [5, 6], "skipped": []}, 0),
    ],
)
def test_a_cancel_that_skipped_a_job_exits_1_and_says_why_on_stderr(answer, code):
    """`mlq cancel 998 999` exited 0 with `skipped:` lines on stdout, where `mlq cancel 999` exits 1."""
    server = FakeServer({("POST", "/api/v1/jobs/cancel"): (200, answer)})
    result = run(server, "cancel", "998", "999")
    assert result.exit_code == code, result.output
    assert result.stdout.strip() == f"cancelled: {' '.join(map(str, answer['cancelled'])) or 'none'}"
    assert result.stderr.splitlines() == [f"skipped: id={row['id']}, why={row['why']}" for row in answer["skipped"]]
    as_json = run(server, "cancel", "998", "999", "-o", "json")
    assert (as_json.exit_code, json.loads(as_json.stdout)) == (code, answer)


def test_cancel_by_filter_takes_the_states_a_job_can_be_in_any_case():
    server = FakeServer({("POST", "/api/v1/jobs/cancel"): (200, {"cancelled": [], "skipped": []})})
    bogus = run(server, "cancel", "--mine", "--state", "bogus")
    assert bogus.exit_code == 2 and "Invalid value for '--state'" in bogus.stderr
    assert all(state.lower() in bogus.stderr.lower() for state in JOB_STATES)
    assert server.requests == []
    assert run(server, "cancel", "--mine", "--state", "Pending").exit_code == 0
    assert server.bodies("POST", "/api/v1/jobs/cancel") == [{"filter": {"owner": "me", "state": "PENDING"}}]


# --- 4. a dry run that can never run --------------------------------------------------------------

NEVER = {"valid": True, "can_ever_run": False, "placement": None, "reason": {"message": "asks 4096 H100"}}


@pytest.mark.parametrize(
    "answer, code",
    [
        (NEVER, 1),
        ({**NEVER, "can_ever_run": True, "reason": None}, 0),
        # a pipeline: the answer at the top is its first step that could never run
        ({**NEVER, "can_ever_run": True, "steps": [{"step": "a", "can_ever_run": True}, NEVER]}, 1),
    ],
)
def test_a_dry_run_that_can_never_run_exits_1_and_still_prints_its_answer(spec_file, answer, code):
    server = FakeServer({("POST", "/api/v1/jobs/dry-run"): (200, answer)})
    table = run(server, "submit", str(spec_file), "--dry-run")
    assert table.exit_code == code, table.output
    assert table.stdout.splitlines()[0].split() == ["VALID", "CAN", "EVER", "RUN"]
    as_json = run(server, "submit", str(spec_file), "--dry-run", "-o", "json")
    assert (as_json.exit_code, json.loads(as_json.stdout)) == (code, answer)


# --- 5. a config file that is not UTF-8 ---------------------------------------------------------


def test_a_config_file_that_is_not_utf8_is_named_not_a_traceback(tmp_path):
    path = tmp_path / "config" / "mlqueue" / "config.toml"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(MlqError) as raised:
        Client()
    assert raised.value.detail == NOT_UTF8.format(path=path)
    result = run(FakeServer({}), "jobs")
    assert (result.exit_code, result.stderr.strip()) == (app.EXIT_REFUSED, NOT_UTF8.format(path=path))


# --- 6. repeated options of mlq jobs --------------------------------------------------------------


def test_jobs_takes_several_states_and_sends_each():
    """`--state running --state succeeded` listed the succeeded jobs alone: click kept the last."""
    server = FakeServer({("GET", "/api/v1/jobs"): (200, {"results": []})})
    assert run(server, "jobs", "--state", "running", "--state", "SUCCEEDED").exit_code == 0
    assert run(server, "jobs").exit_code == 0
    first, unfiltered = (request.url.params for request in server.requests)
    assert (first.get_list("state"), unfiltered.get_list("state")) == (["RUNNING", "SUCCEEDED"], [])
    assert (first["limit"], unfiltered["limit"]) == ("50", "50")


@pytest.mark.parametrize(
    "args", [["--team", "a", "--team", "b"], ["--since", "7d", "--since", "1h"], ["--limit", "5", "--limit", "9"]]
)
def test_a_one_value_option_of_jobs_given_twice_is_a_usage_error(args):
    server = FakeServer({("GET", "/api/v1/jobs"): (200, {"results": []})})
    result = run(server, "jobs", *args)
    assert result.exit_code == 2
    values = ", ".join(args[1::2])
    assert f"Invalid value for '{args[0]}': {app.ONE_VALUE.format(count=2, values=values)}" in result.stderr
    assert server.requests == []
    assert run(server, "jobs", *args[:2]).exit_code == 0


# --- 7. a table through a pipe --------------------------------------------------------------------

LONG_REASON = "team vision uses 72 H100 (guaranteed 32, borrowing limit reached at 96); " * 4
QUEUE = {
    "count": 2,
    "results": [
        {**job(41), "position": 1, "gpu_count": 8, "gpu_type": "H100", "pending_reason": {"message": LONG_REASON}},
        {**job(42), "position": 2, "name": "名前", "pending_reason": {"message": "waits on [z1-r1]\nand more"}},
    ],
}


def test_a_piped_table_is_a_line_per_row_never_wrapped_or_cut():
    """Cut at 200 columns, a long REASON wrapped onto lines of its own: `awk '{print $2}'` read
    pieces of it as job ids."""
    result = run(FakeServer({("GET", "/api/v1/queue"): (200, QUEUE)}), "queue", "-o", "wide")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 3 and [line.split()[:2] for line in lines] == [["POS", "ID"], ["1", "41"], ["2", "42"]]
    assert LONG_REASON.strip() in lines[1] and "waits on [z1-r1] and more" in lines[2]
    assert all(line == line.rstrip() for line in lines)
    assert len({line.index("TEAM") for line in lines[:1]} | {lines[1].index("vision")}) == 1  # aligned


def test_a_piped_tables_empty_cell_is_a_dash_so_the_columns_keep_their_numbers():
    """A job the last pass has not ordered yet has no position: as spaces alone, `awk '{print
    $2}'` read its state for its id (found by a review)."""
    unordered = {**QUEUE, "results": [{**job(43), "position": None}]}
    result = run(FakeServer({("GET", "/api/v1/queue"): (200, unordered)}), "queue")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1].split()[:2] == ["-", "43"]


def test_a_table_at_a_terminal_is_richs_and_keeps_brackets_in_cells(monkeypatch):
    """At a terminal the table is rich's as before, but a cell is text: `[z1-r1]` was read as markup
    and vanished."""
    monkeypatch.setattr(output, "sys", types.SimpleNamespace(stdout=types.SimpleNamespace(isatty=lambda: True)))
    result = run(FakeServer({("GET", "/api/v1/queue"): (200, QUEUE)}), "queue")
    assert result.exit_code == 0, result.output
    assert "[z1-r1]" in result.stdout


# --- 8. a stale forecast --------------------------------------------------------------------------

WHY = {
    "job_id": 7,
    "state": "PENDING",
    "reason": {"message": "no node has 8 free H100"},
    "likely_start": "2026-12-08T19:30:28Z",
    "latest_start": "2026-12-08T21:00:00Z",
}
AS_OF = "2026-12-08T10:00:00Z"


def test_why_says_a_stale_forecast_is_stale_as_status_does():
    stale = {**WHY, "estimated_start_as_of": AS_OF, "estimated_start_stale": True}
    note = f" (STALE: forecast as of {AS_OF}, not refreshed since)"
    said = run(FakeServer({("GET", "/api/v1/jobs/7/why"): (200, stale)}), "why", "7")
    assert said.exit_code == 0, said.output
    assert said.stdout.splitlines()[2:] == [
        f"likely start: {WHY['likely_start']}{note}",
        f"latest start: {WHY['latest_start']}{note}",
    ]
    status = FakeServer({("GET", "/api/v1/jobs/7"): (200, job(**stale, pending_reason=WHY["reason"]))})
    assert run(status, "status", "7").stdout.splitlines()[-1].endswith(note)  # the same words


@pytest.mark.parametrize("answer", [WHY, {**WHY, "estimated_start_as_of": AS_OF, "estimated_start_stale": False}])
def test_why_from_an_older_server_or_with_a_fresh_forecast_is_as_before(answer):
    said = run(FakeServer({("GET", "/api/v1/jobs/7/why"): (200, answer)}), "why", "7")
    assert said.stdout.splitlines()[2:] == [
        f"likely start: {WHY['likely_start']}",
        f"latest start: {WHY['latest_start']}",
    ]


def test_queue_marks_a_stale_forecasts_starts_and_says_what_the_mark_means():
    start = {"likely_start": "2026-12-08T19:30:28Z", "estimated_start": "2026-12-08T21:00:00Z"}
    rows = [
        {**job(41), "position": 1, **start, "estimated_start_as_of": AS_OF, "estimated_start_stale": True},
        {**job(42), "position": 2, **start, "estimated_start_as_of": AS_OF, "estimated_start_stale": False},
        {**job(43), "position": 3, **start},  # an older server's row
    ]
    server = FakeServer({("GET", "/api/v1/queue"): (200, {"count": 3, "results": rows})})
    wide = run(server, "queue", "-o", "wide")
    assert wide.exit_code == 0, wide.output
    marked = [[cell for cell in line.split() if cell.startswith("2026-")] for line in wide.stdout.splitlines()[1:]]
    stale = [f"{start['likely_start']}{STALE_MARK}", f"{start['estimated_start']}{STALE_MARK}"]
    assert marked == [stale, list(start.values()), list(start.values())]
    assert wide.stderr.strip() == jobs.STALE_STARTS.format(mark=STALE_MARK, as_of=AS_OF)
    fresh = FakeServer({("GET", "/api/v1/queue"): (200, {"count": 2, "results": rows[1:]})})
    assert run(fresh, "queue").stderr == ""
    assert json.loads(run(server, "queue", "-o", "json").stdout) == rows  # the API's rows as they came


# --- a 200 that is not an mlqueue answer ------------------------------------------------------


@pytest.mark.parametrize("answer", [{"foo": 1}, [{"id": "x"}], "text"])
def test_an_answer_of_another_shape_is_one_line_not_a_traceback(answer):
    """A proxy (or another program) answering 200 with other JSON: `mlq status` raised a
    TypeError or AttributeError with its traceback (QA)."""
    result = run(FakeServer({("GET", "/api/v1/jobs/4"): (200, answer)}), "status", "4")
    assert result.exit_code == 1
    assert result.stderr.startswith("the server's answer is not an mlqueue job (")
    assert "Traceback" not in result.output


def test_ctrl_c_during_submit_follow_does_not_name_the_state_it_was_submitted_in(spec_file):
    """QA: 'job 56 is still PENDING' while it ran and printed its log: the streamed log reads no
    state, and the one named was the submit's. Once its lines come, the state is not named."""
    first = {
        "job_id": 7,
        "rank": 0,
        "attempt": 1,
        "stream": "stdout",
        "offset": 0,
        "next_offset": 7,
        "text": "tick 1\n",
    }
    server = FakeServer(
        {
            ("POST", "/api/v1/jobs"): (201, job()),
            ("GET", "/api/v1/jobs/7/logs"): interrupted_after([(200, first)]),
        }
    )
    result = run(server, "submit", str(spec_file), "--follow")
    assert result.exit_code == app.EXIT_INTERRUPTED
    assert "tick 1" in result.stdout.splitlines()
    assert result.stderr.strip().splitlines()[-1] == "mlq: interrupted; job 7 was not cancelled"


# --- stop 45: version, priorities in any case, one child --------------------------------------


def test_version_is_the_installed_packages():
    from importlib import metadata

    result = run(FakeServer({}), "--version")
    assert (result.exit_code, result.output) == (0, f"mlq {metadata.version('mlqueue')}\n")


def test_a_priority_is_taken_in_any_case_and_sent_as_the_api_spells_it():
    server = FakeServer({("PATCH", "/api/v1/jobs/7"): (200, job(priority="P1"))})
    assert run(server, "set", "7", "--priority", "p1").exit_code == 0
    assert server.bodies("PATCH", "/api/v1/jobs/7") == [{"priority": "P1"}]
    refused = run(server, "set", "7", "--priority", "p7")
    assert refused.exit_code == 2 and "--priority" in refused.output


@pytest.mark.parametrize(
    ("kind", "count", "noun"),
    [("array", 1, "element"), ("array", 2, "elements"), ("sweep", 1, "trial"), ("pipeline", 1, "step")],
)
def test_a_group_of_one_child_is_named_in_the_singular(kind, count, noun):
    from mlqueue.cli.groups import group_summary

    group = {"kind": kind, "count": count, "parallelism": 1, "pending": count, "method": "grid", "seed": 1}
    assert group_summary(group).startswith(f"{kind} of {count} {noun}")


def test_a_cancel_names_jobs_still_stopping_apart_from_those_cancelled():
    server = FakeServer({("POST", "/api/v1/jobs/cancel"): (200, {"cancelled": [5, 6], "stopping": [6], "skipped": []})})
    result = run(server, "cancel", "5", "6")
    assert result.stdout.splitlines() == [
        "cancelled: 5",
        "stopping: 6 (cancel requested: CANCELLED once their tasks stop)",
    ]
    server = FakeServer({("POST", "/api/v1/jobs/cancel"): (200, {"cancelled": [6], "stopping": [6], "skipped": []})})
    assert run(server, "cancel", "6", "7").stdout.splitlines() == [
        "stopping: 6 (cancel requested: CANCELLED once their tasks stop)"
    ]


def test_status_shows_the_signal_that_ended_a_rank_in_its_exit_column():
    """QA: a rank killed by SIGKILL showed EXIT `-` (the API has exit_signal; the page shows it)."""
    tasks = [
        {"rank": 0, "state": "FAILED", "node": "n1", "attempt": 1, "exit_code": None, "exit_signal": "SIGKILL"},
        {"rank": 1, "state": "FAILED", "node": "n2", "attempt": 1, "exit_code": 3, "exit_signal": ""},
    ]
    server = FakeServer(
        {
            ("GET", "/api/v1/jobs/7"): (200, job(state="RUNNING", tasks=tasks)),
        }
    )
    rows = [line.split() for line in run(server, "status", "7").stdout.splitlines()]
    assert ["0", "FAILED", "n1", "1", "SIGKILL", "-"] in rows and ["1", "FAILED", "n2", "1", "3", "-"] in rows


def test_a_dry_run_that_can_never_run_names_the_field_to_change(spec_file):
    """QA: the API's never-fits verdict names its field (`resources.gpu_count`,
    `node_selector`); `mlq submit --dry-run` printed the sentence alone."""
    verdict = {
        "valid": True,
        "can_ever_run": False,
        "placement": None,
        "reason": {"code": "NEVER_FITS", "message": "no H100 node carries ib=hdr200", "field": "node_selector"},
        "suggestions": [],
    }
    server = FakeServer({("POST", "/api/v1/jobs/dry-run"): (200, verdict)})
    result = run(server, "submit", str(spec_file), "--dry-run")
    assert result.exit_code == 1
    assert "reason: no H100 node carries ib=hdr200 (change node_selector)" in result.output.splitlines()
