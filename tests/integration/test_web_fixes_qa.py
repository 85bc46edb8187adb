"""QA's web defects: the what-if page's "to" day past the calendar, a repeated `group_by`, a
proposal that finishes nothing, the forecast's accuracy for members, and metrics series left out."""

import pytest
from django.utils import timezone
from django.utils.html import escape

from scheduling import job_metrics
from scheduling.models import QuotaPreview
from scheduling.web.queue import short_duration
from scheduling.web.whatif_page import NONE_FINISHED, _cells
from tests.conftest import make_spec
from tests.integration.test_forecast_accuracy import forecast
from tests.integration.test_reports_page import history as reports_history  # noqa: F401 (fixture)
from tests.integration.test_usage_api import NOW, RFM, H, attempt, ledger, now, rows_by, usage  # noqa: F401
from tests.integration.test_what_if import NO_BORROWING, history, start  # noqa: F401 (fixture)
from tests.ledger_history import FM

pytestmark = pytest.mark.django_db


# --- 1. the what-if page's "to" day -------------------------------------------------------


@pytest.mark.parametrize("to", ["9999-12-31", "2026-13-01"])
def test_a_to_day_with_no_day_after_or_no_such_day_is_the_apis_400_by_the_field(clock, logged_in, api, history, to):  # noqa: F811
    form = {"team": FM, "resource_class": "gpu:H100", "guaranteed": "16", "from": "2026-04-13", "to": to}
    body = {key: value for key, value in NO_BORROWING.items() if key != "borrowing_limit"}
    expected = start(api, "rita", {**body, "guaranteed": 16, "to": to})
    assert expected.status_code == 400
    message = expected.json()["fields"]["to"][0]
    answer = logged_in("rita").post("/teams/what-if/", form)
    assert answer.status_code == 400
    assert f'<span class="error">{escape(message)}</span>' in answer.content.decode()
    assert not QuotaPreview.objects.exists()


# --- 5. a repeated group_by ---------------------------------------------------------------


def test_a_repeated_group_by_groups_by_both_as_the_comma_form_does(api, ledger):  # noqa: F811
    both = usage(api, group_by=["team", "owner"])
    assert both.status_code == 200, both.json()
    assert both.json()["group_by"] == ["team", "owner"]
    assert both.json()["rows"] == usage(api, group_by="team,owner").json()["rows"]
    assert usage(api, group_by=["team", "colour"]).status_code == 400


# --- 6. a side that finishes nothing ------------------------------------------------------


def side(finished: int, wait: float, unfinished: int) -> dict:
    figures = {"avg_wait_s": wait, "p95_wait_s": wait, "avg_jct_s": wait, "gpu_hours_lost": 0.0, "share": 0.5}
    return {**figures, "finished": finished, "unfinished": unfinished}


def test_averages_over_no_finished_job_are_a_dash_neither_better_nor_worse():
    cells = _cells(side(17, 3600.0, 0), side(0, 0.0, 17))
    assert [(cell.proposed, cell.trend) for cell in cells[:3]] == [(NONE_FINISHED, "")] * 3
    assert cells[0].now == short_duration(3600.0)
    assert (cells[5].proposed, cells[5].trend) == ("17", "worse")  # unfinished: still compared
    assert [cell.trend for cell in _cells(side(2, 3600.0, 0), side(2, 0.0, 0))[:3]] == ["better"] * 3


# --- 7. the forecast's accuracy on the reports page -----------------------------------------


def test_the_reports_page_shows_the_forecasts_accuracy_to_leads_and_admins_only(logged_in, reports_history):  # noqa: F811
    forecast(RFM, NOW - 2 * H, first=NOW - 2 * H, last=NOW - 2 * H)
    window = {"from": "2026-04-19", "to": "2026-04-20"}
    assert 'id="report-forecast"' not in logged_in("alice").get("/reports/", window).content.decode()
    assert 'id="report-forecast"' in logged_in("rita").get("/reports/", window).content.decode()
    assert 'id="report-forecast"' in logged_in("ops").get("/reports/", window).content.decode()


# --- 8. series left out of a metrics answer -----------------------------------------------


def test_every_series_left_out_or_cut_is_named_in_truncated(api, clock):
    job_id = api("alice").post("/api/v1/jobs", make_spec(), format="json").json()["id"]
    at = timezone.now()
    events = [
        {"job_id": job_id, "rank": 0, "attempt": 1, "seq": step, "step": step, "time": at.timestamp(),
         "values": {f"m{n:02d}": float(step) for n in range(4)}}
        for step in range(1, 7)
    ]  # fmt: skip
    job_metrics.do_record_metrics(events, now=at)
    found, cut = job_metrics.metric_series([job_id], per_series=5, total=8)
    assert {name: len(points) for name, points in found[job_id].items()} == {"m00": 5, "m01": 2}
    assert cut == [{"job_id": job_id, "name": name} for name in ("m00", "m01", "m02", "m03")]
