"""What-if on the cluster's own history: `manage.py export_trace` (the ledger's window as a
trace bench/replay.py reads) and quota previews (API and teams page), run end to end through
the Celery task (eager), with who may, bad input and the bounds."""

import csv
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command

from bench import replay
from mlqueue.celery import app as celery_app
from scheduling.models import Job, PreviewState, QuotaPreview
from scheduling.sim.trace import load_generic
from scheduling.web.whatif_api import CPU_NOT_REPLAYED
from scheduling.whatif import (
    BACKWARDS,
    NO_JOBS,
    NOT_A_LEAD,
    SAME_QUOTA,
    TIMED_OUT,
    TOO_LONG,
    TOO_MANY_JOBS,
    do_run_preview,
)
from teams.models import Quota
from teams.services import OVER_PARENT
from tests.conftest import make_spec
from tests.ledger_history import DAY, FM, HOUR, RANKING, VISION, around_the_morning, busy_morning, record

WINDOW = {"from": "2026-04-13", "to": "2026-04-14"}
# FM may no longer borrow: at most its 32 guaranteed H100 at once.
NO_BORROWING = {"team": FM, "resource_class": "gpu:H100", "borrowing_limit": 0, **WINDOW}


@pytest.fixture
def history(demo):
    ids = busy_morning()
    around_the_morning()
    return ids


@pytest.fixture
def eager(monkeypatch, django_capture_on_commit_callbacks):
    """Celery tasks run in the test's process as they are sent (after the commit)."""
    monkeypatch.setitem(celery_app.conf, "task_always_eager", True)
    return django_capture_on_commit_callbacks


# --- export_trace ------------------------------------------------------------------------


def export(tmp_path, **options) -> list[dict]:
    out = tmp_path / "trace.csv"
    call_command("export_trace", "--from", options.pop("start"), "--to", options.pop("end"), "--out", str(out))
    with open(out, newline="") as handle:
        return list(csv.DictReader(handle))


def test_export_trace_writes_the_window_s_jobs_with_the_work_they_needed(clock, history, tmp_path):
    rows = export(tmp_path, start="2026-04-13", end="2026-04-14")
    first = history[0]
    # FM's preempted job: 20 kept minutes + 100 after = 2 h, not the 2 h 10 min it ran.
    assert [(r["job_id"], r["submit_time"], r["duration"], r["num_gpus"], r["team"]) for r in rows] == [
        *[(str(job_id), "32400", "7200", "16", FM) for job_id in history[:6]],
        (str(history[6]), "32460", "3600", "16", RANKING),
        (str(history[7]), "32460", "3600", "16", RANKING),
        # Still running: counted up to the end of the window (a lower bound).
        ("8003", "72000", "14400", "8", VISION),
    ]
    assert rows[0]["job_id"] == str(first)
    assert {(r["gpu_type"], r["priority"], r["max_runtime"], r["group"]) for r in rows} == {("H100", "P2", "", "")}


def test_the_exported_trace_replays_with_bench_replay(clock, history, tmp_path, capsys):
    export(tmp_path, start="2026-04-13", end="2026-04-14")
    figures = replay.main(["--trace", str(tmp_path / "trace.csv"), "--nodes", "16", "--baseline", "none"])
    assert (figures["jobs"], figures["finished"], figures["refused"]) == (9, 9, 0)
    # 16 nodes hold every job at once: nobody waits.
    assert figures["max_wait_s"] == 0.0


def test_a_jobs_max_runtime_and_array_limit_come_from_its_row_while_it_exists(clock, api, demo, tmp_path):
    spec = make_spec(
        client_job_id="arr",
        resources={"gpu_count": 8},
        max_runtime_hours=3,
        array={"count": 2, "parallelism": 1},
    )
    assert api("alice").post("/api/v1/jobs", spec, format="json").status_code == 201
    children = list(Job.objects.filter(parent__isnull=False).order_by("group_index").values_list("id", "parent_id"))
    for job_id, _ in children:
        record(job_id, FM, queued=0, started=0, ended=HOUR, gpus=8)
    rows = export(tmp_path, start="2026-04-13", end="2026-04-14")
    assert [(r["job_id"], r["max_runtime"], r["group"]) for r in rows] == [
        (str(job_id), "10800", f"{parent}%1") for job_id, parent in children
    ]
    jobs = load_generic(tmp_path / "trace.csv")
    assert [(j.max_runtime, j.group, j.parallelism) for j in jobs] == [(10800.0, children[0][1], 1)] * 2


@pytest.mark.parametrize(
    "args, message",
    [
        (["--from", "2026-04-14", "--to", "2026-04-13"], "--to 2026-04-13T00:00:00+00:00 must be after --from"),
        (["--from", "last week", "--to", "2026-04-13"], "--from 'last week': expected YYYY-MM-DD"),
        (["--from", "2026-04-13", "--to", "2026-04-14", "--out", "/nonexistent/x.csv"], "--out /nonexistent/x.csv:"),
    ],
)
def test_export_trace_refuses_bad_options_with_a_message(db, args, message):
    with pytest.raises(CommandError, match=message.replace("+", r"\+")):
        call_command("export_trace", *args)


# --- previews ------------------------------------------------------------------------------


def start(api, username: str, body: dict):
    return api(username).post("/api/v1/what-if", body, format="json")


def test_a_lead_previews_a_quota_change_end_to_end(clock, api, history, eager):
    with eager(execute=True):
        response = start(api, "rita", NO_BORROWING)
    assert response.status_code == 202, response.json()
    assert (response.json()["state"], response.json()["current"], response.json()["proposed"]) == (
        "QUEUED",
        {"guaranteed": 32, "borrowing_limit": 64, "weight": 1.0},
        {"guaranteed": 32, "borrowing_limit": 0, "weight": 1.0},
    )
    preview = api("rita").get(f"/api/v1/what-if/{response.json()['id']}").json()
    assert (preview["state"], preview["progress"], preview["message"]) == ("DONE", 1.0, "")
    result = preview["result"]
    assert (result["jobs"], result["refused"], result["skipped"]) == (9, 0, {"cpu_only": 1})
    teams = {row["team"]: row for row in result["teams"]}
    assert set(teams) == {FM, RANKING, VISION}
    # Today FM's six jobs all start at 09:00; held to 32 GPUs, two at a time: they wait 0, 2 h
    # and 4 h, two each, and end 2, 4 and 6 hours after their submit.
    assert (teams[FM]["current"]["avg_wait_s"], teams[FM]["proposed"]["avg_wait_s"]) == (0.0, 2 * HOUR)
    assert (teams[FM]["current"]["avg_jct_s"], teams[FM]["proposed"]["avg_jct_s"]) == (2 * HOUR, 4 * HOUR)
    assert teams[RANKING]["proposed"]["avg_wait_s"] == 0.0
    assert teams[FM]["current"]["share"] + teams[RANKING]["current"]["share"] + teams[VISION]["current"]["share"] == (
        pytest.approx(1.0)
    )
    assert QuotaPreview.objects.get().state == PreviewState.DONE
    # Nothing was saved.
    assert Quota.objects.get(team__name=FM, resource_class="gpu:H100").borrowing_limit == 64


def test_with_quotas_private_a_preview_shows_only_the_teams_its_reader_may_read(
    clock, api, history, eager, logged_in, settings
):
    """Any lead read every team's jobs, waits and share in a preview, where the usage API and
    the teams page refused them those figures (found by QA)."""
    with eager(execute=True):
        preview_id = start(api, "rita", NO_BORROWING).json()["id"]
    settings.MLQ_QUOTAS_PUBLIC = False
    result = api("rita").get(f"/api/v1/what-if/{preview_id}").json()["result"]
    assert ([row["team"] for row in result["teams"]], result["teams_hidden"]) == ([FM], 2)
    assert result["cluster"]["current"]["jobs"] == 9  # the whole cluster's figures stay
    page = logged_in("rita").get(f"/teams/what-if/{preview_id}/").content.decode()
    assert f'id="what-if-{FM}"' in page and f'id="what-if-{RANKING}"' not in page
    assert "2 other teams replayed too, not shown" in page
    every = api("ops").get(f"/api/v1/what-if/{preview_id}").json()["result"]
    assert ({row["team"] for row in every["teams"]}, every["teams_hidden"]) == ({FM, RANKING, VISION}, 0)
    assert "teams_hidden" not in QuotaPreview.objects.get().result  # as read, never saved


def test_the_teams_page_starts_a_preview_polls_it_and_shows_each_team(clock, logged_in, history, eager):
    client = logged_in("rita")
    page = client.get("/teams/").content.decode()
    assert 'id="what-if-form"' in page and f'<option value="{FM}"' in page
    form = {"team": FM, "resource_class": "gpu:H100", "guaranteed": "", "borrowing_limit": "0", "weight": "", **WINDOW}
    with eager(execute=False):  # sent after the answer: the page first shows it waiting
        answer = client.post("/teams/what-if/", form, HTTP_HX_REQUEST="true").content.decode()
    preview = QuotaPreview.objects.get()
    assert f'hx-get="/teams/what-if/{preview.pk}/"' in answer and 'hx-trigger="load delay:1s"' in answer
    assert "waiting for a worker" in answer and "borrowing_limit <b>64 → 0</b>" in answer
    assert do_run_preview(preview_id=preview.pk) == PreviewState.DONE
    done = client.get(f"/teams/what-if/{preview.pk}/").content.decode()
    assert "hx-trigger" not in done  # done: it stops polling
    fm_row = done[done.index(f'id="what-if-{FM}"') :].split("</tr>")[0]
    assert '<td class="worse">0s → <b>2h00m</b></td>' in fm_row  # the average wait
    assert "9 jobs replayed, 1 left out (CPU jobs)" in done


def test_progress_is_written_as_the_replay_goes_and_a_run_past_its_time_limit_fails(clock, api, history, settings):
    settings.MLQ_WHATIF_TIME_LIMIT_S = 60
    with_limit = start(api, "ops", NO_BORROWING).json()
    seconds = iter(range(0, 10_000, 45))  # each look at the clock 45 s later
    assert do_run_preview(preview_id=with_limit["id"], clock=lambda: next(seconds)) == PreviewState.FAILED
    preview = QuotaPreview.objects.get(pk=with_limit["id"])
    assert preview.message == TIMED_OUT.format(limit=60)
    assert 0 < preview.progress < 1 and preview.result is None


def test_a_preview_is_run_once_and_a_dead_workers_run_is_claimed_again(clock, api, history, settings):
    preview_id = start(api, "ops", NO_BORROWING).json()["id"]
    assert do_run_preview(preview_id=preview_id) == PreviewState.DONE
    assert do_run_preview(preview_id=preview_id) is None  # a second delivery of the task
    QuotaPreview.objects.filter(pk=preview_id).update(state=PreviewState.RUNNING, result=None)
    assert do_run_preview(preview_id=preview_id) is None  # another worker is on it
    clock.shift(timedelta(seconds=settings.MLQ_WHATIF_TIME_LIMIT_S + 61))
    assert do_run_preview(preview_id=preview_id) == PreviewState.DONE


@pytest.mark.parametrize(
    "username, team, status",
    [
        ("alice", FM, 403),  # a member
        ("rita", RANKING, 403),  # a lead of another team
        ("paul", FM, 403),
        ("rita", FM, 202),
        ("rita", VISION, 403),  # rita leads FM only, not its division
        ("ops", VISION, 202),  # an admin
    ],
)
def test_only_leads_of_the_team_or_above_and_admins_may_preview(clock, api, history, username, team, status):
    response = start(api, username, {**NO_BORROWING, "team": team})
    assert response.status_code == status, response.json()
    if status == 403:
        assert response.json()["detail"] == NOT_A_LEAD.format(team=team)
        assert not QuotaPreview.objects.exists()


def test_a_preview_is_seen_by_who_asked_and_the_teams_leads_only(clock, api, history, logged_in):
    preview_id = start(api, "ops", NO_BORROWING).json()["id"]
    assert api("rita").get(f"/api/v1/what-if/{preview_id}").status_code == 200
    for username in ("alice", "paul"):
        assert api(username).get(f"/api/v1/what-if/{preview_id}").status_code == 404
    assert logged_in("alice").get(f"/teams/what-if/{preview_id}/").status_code == 404


def test_a_member_sees_no_preview_form_and_may_not_post_one(clock, logged_in, history):
    client = logged_in("alice")
    assert 'id="what-if-form"' not in client.get("/teams/").content.decode()
    answer = client.post("/teams/what-if/", {**NO_BORROWING, "borrowing_limit": "0"})
    assert (answer.status_code, answer.content.decode()) == (403, NOT_A_LEAD.format(team=FM))


@pytest.mark.parametrize(
    "change, field, message",
    [
        ({"from": None}, "from", "This field is required."),
        ({"to": "tomorrow"}, "to", "Datetime has wrong format."),
        ({"from": "2026-04-14", "to": "2026-04-13"}, "to", BACKWARDS.format(start="2026-04-14T00:00:00+00:00")),
        ({"from": "2026-01-01"}, "to", TOO_LONG.format(days=103.0, limit=31)),
        ({"team": "nobody"}, "team", "no team named 'nobody'."),
        ({"resource_class": "gpu:B200"}, "resource_class", "unknown resource class"),
        ({"resource_class": "cpu"}, "resource_class", CPU_NOT_REPLAYED),  # a 202 that could show no change
        ({"borrowing_limit": -1}, "borrowing_limit", "Ensure this value is greater than or equal to 0."),
        ({"borrowing_limit": None}, "guaranteed", SAME_QUOTA),  # nothing proposed
        ({"borrowing_limit": 64}, "guaranteed", SAME_QUOTA),
        (
            {"borrowing_limit": None, "guaranteed": 40},
            "guaranteed",
            OVER_PARENT.format(team=FM, total=56, rclass="gpu:H100", parent="research", parent_amount=51),
        ),
        ({"from": "2026-03-01", "to": "2026-03-02"}, "from", NO_JOBS),
        ({"bogus": 1}, "bogus", "unknown field."),  # it was accepted (202)
    ],
)
def test_bad_input_is_a_400_naming_the_field(clock, api, history, change, field, message):
    body = {key: value for key, value in {**NO_BORROWING, **change}.items() if value is not None}
    response = start(api, "rita", body)
    assert response.status_code == 400, response.json()
    assert message in response.json()["fields"][field][0]
    assert not QuotaPreview.objects.exists()


def test_a_preview_meets_the_rules_the_change_would(clock, api, history):
    """QA: a lead previewed her own team at weight 1000, which she may not set; and a limit past
    the cluster's size was previewed as if it could be given."""
    body = {key: value for key, value in NO_BORROWING.items() if key != "borrowing_limit"}
    weight = start(api, "rita", {**body, "weight": 1000})
    assert weight.status_code == 403, weight.json()
    assert "may change research-foundation-models's weight" in weight.json()["fields"]["weight"][0]
    too_big = start(api, "ops", {**NO_BORROWING, "borrowing_limit": 100000})
    assert (
        too_big.status_code == 400
        and "more than could ever be borrowed" in too_big.json()["fields"]["borrowing_limit"][0]
    )
    assert not QuotaPreview.objects.exists()


def test_a_window_with_too_many_jobs_is_refused(clock, api, history, settings):
    settings.MLQ_WHATIF_MAX_JOBS = 5
    response = start(api, "rita", NO_BORROWING)
    assert response.status_code == 400
    assert response.json()["fields"]["from"] == [TOO_MANY_JOBS.format(jobs=11, limit=5)]


def test_the_page_shows_bad_input_beside_its_field(clock, logged_in, history):
    client = logged_in("rita")
    form = {"team": FM, "resource_class": "gpu:H100", "borrowing_limit": "0", "from": "2026-04-14", "to": "2026-04-13"}
    answer = client.post("/teams/what-if/", form)
    assert answer.status_code == 400
    html = answer.content.decode()
    assert f'<span class="error">{BACKWARDS.format(start="2026-04-14T00:00:00+00:00")}</span>' in html
    assert client.post("/teams/what-if/", form, HTTP_HX_REQUEST="true").status_code == 200  # htmx swaps 2xx only
    assert not QuotaPreview.objects.exists()


def test_the_window_counts_jobs_by_their_first_submit(clock, history):
    from scheduling.history import count_jobs, export_window

    # 8001's second attempt waited from 00:01, but the job was submitted the day before.
    export_ = export_window(DAY, DAY + timedelta(days=1), as_of=DAY + timedelta(days=1))
    assert 8001 not in {job.job_id for job in export_.jobs}
    assert count_jobs(DAY, DAY + timedelta(days=1)) == 11  # the bound counts candidates: 8001 too


def test_a_body_that_is_not_an_object_is_a_400(clock, api, history):
    response = api("rita").post("/api/v1/what-if", [NO_BORROWING], format="json")
    assert response.status_code == 400
    assert "Expected a dictionary" in response.json()["detail"]


def test_the_pages_to_date_is_included_as_on_the_reports_page(clock, logged_in, history, eager):
    form = {"team": FM, "resource_class": "gpu:H100", "borrowing_limit": "0", "from": "2026-04-13", "to": "2026-04-13"}
    with eager(execute=False):
        answer = logged_in("rita").post("/teams/what-if/", form, HTTP_HX_REQUEST="true")
    assert answer.status_code == 200, answer.content  # one whole day, not "to must be later than from"
    preview = QuotaPreview.objects.get()
    assert (preview.window_start.isoformat(), preview.window_end.isoformat()) == (
        "2026-04-13T00:00:00+00:00",
        "2026-04-14T00:00:00+00:00",
    )
