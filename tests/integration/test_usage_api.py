"""GET /api/v1/usage and the prices API on a frozen clock, from ledger rows written as the
lifecycle writes them: exact GPU-hours inside the window, costs across a price change,
lost work by cause, outcomes, queue waits, day buckets, who sees what, CSV, bad parameters."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.contrib.auth import get_user_model

from scheduling import rollup
from scheduling.models import Price, UsageRecord
from teams.models import AuditEvent, Team

NOW = datetime(2026, 4, 20, 12, 0, tzinfo=UTC)
H = timedelta(hours=1)


@pytest.fixture
def now():
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


def attempt(job_id, *, team, owner, start, end=None, rclass="gpu:H100", gpus=8, cpus=16, wait=H / 2, **more):
    """A ledger row: `start` and `end` as hours relative to NOW (negative: before); a closed
    one added to the usage rollup, as the transition that closes a row adds it."""
    ended = NOW + end * H if end is not None else None
    record = UsageRecord.objects.create(
        job_id=job_id,
        attempt=more.pop("attempt", 1),
        job_name=f"job-{job_id}",
        team_id=Team.objects.get(name=team).pk,
        team_name=team,
        owner_id=get_user_model().objects.get(username=owner).pk,
        owner_name=owner,
        resource_class=rclass,
        priority=more.pop("priority", "P2"),
        gpus=gpus if rclass != "cpu" else 0,
        cpus=cpus,
        queued_at=NOW + start * H - wait,
        started_at=NOW + start * H,
        ended_at=ended,
        outcome=more.pop("outcome", "SUCCEEDED" if ended else ""),
        **more,
    )
    if ended:
        rollup.do_add_closed([record.pk])
    return record


RFM, VISION, RANKING = "research-foundation-models", "research-vision", "production-ranking"


@pytest.fixture
def ledger(demo, now):
    # alice: 8 H100 from 09:00 to 11:30 (20 GPU-h; 40 CPU-h), waited 30 min.
    attempt(1, team=RFM, owner="alice", start=-3, end=-0.5)
    # rita: 16 H100 from 06:00 to 10:00, preempted; 2 GPU-h lost since its checkpoint; waited 1 h.
    attempt(
        2,
        team=RFM,
        owner="rita",
        start=-6,
        end=-2,
        gpus=16,
        wait=H,
        outcome="PREEMPTED",
        lost_gpu_hours=2.0,
        lost_cause="preemption",
    )
    # bob: 4 A100 since 10:00, still running; waited 2 h.
    attempt(3, team=RANKING, owner="bob", start=-2, rclass="gpu:A100", gpus=4, cpus=8, wait=2 * H)
    # victor: a CPU job, 32 CPUs from 08:00 to 09:00 that failed, losing nothing on GPUs.
    attempt(4, team=VISION, owner="victor", start=-4, end=-3, rclass="cpu", cpus=32, outcome="FAILED", wait=3 * H)


def usage(api, user="ops", **params):
    params.setdefault("from", "2026-04-20T08:00:00Z")
    params.setdefault("to", "2026-04-20T12:00:00Z")
    return api(user).get("/api/v1/usage", params)


def rows_by(body, key="team"):
    return {row[key]: row for row in body["rows"]}


def test_gpu_hours_count_only_the_part_of_each_attempt_inside_the_window(api, ledger):
    body = usage(api).json()
    rows = rows_by(body)
    # rita's 06:00-10:00 counts from 08:00: 2 h x 16; alice's whole 2.5 h x 8.
    assert (rows[RFM]["gpu_hours"], rows[RFM]["cpu_hours"]) == (52.0, 72.0)
    # bob's runs on to now (12:00): 2 h x 4.
    assert (rows[RANKING]["gpu_hours"], rows[RANKING]["cpu_hours"]) == (8.0, 16.0)
    assert (rows[VISION]["gpu_hours"], rows[VISION]["cpu_hours"]) == (0.0, 32.0)
    assert (body["total"]["gpu_hours"], body["total"]["cpu_hours"]) == (60.0, 120.0)
    assert body["group_by"] == ["team"] and body["currency"] == "USD"


def test_lost_work_outcomes_and_queue_waits(api, ledger):
    rows = rows_by(usage(api).json())
    assert rows[RFM]["lost_gpu_hours_by_cause"] == {"preemption": 2.0}
    assert rows[RFM]["jobs_by_outcome"] == {"PREEMPTED": 1, "SUCCEEDED": 1}
    # Waits of the attempts that started inside the window: alice's (09:00) only; rita's began at 06:00.
    assert (rows[RFM]["attempts_started"], rows[RFM]["queue_wait_p50_s"]) == (1, 1800.0)
    assert (rows[VISION]["jobs_by_outcome"], rows[VISION]["lost_gpu_hours"]) == ({"FAILED": 1}, 0.0)
    total = usage(api, **{"from": "2026-04-20T00:00:00Z"}).json()["total"]
    # Waits 1800, 3600, 7200, 10800 s: p50 between the middle two, p95 near the top.
    assert (total["attempts_started"], total["queue_wait_p50_s"], total["queue_wait_p95_s"]) == (4, 5400.0, 10260.0)


def test_costs_split_an_attempt_at_a_price_change(api, ledger):
    Price.objects.create(
        resource_class="gpu:H100", gpu_hour=Decimal("2.00"), cpu_hour=Decimal("0.05"), effective_from=NOW - 24 * H
    )
    Price.objects.create(
        resource_class="gpu:H100", gpu_hour=Decimal("3.00"), cpu_hour=Decimal("0.05"), effective_from=NOW - 2 * H
    )
    rows = rows_by(usage(api, group_by="owner").json(), "owner")
    # alice, 8 GPUs: 09:00-10:00 at 2.00 (16), 10:00-11:30 at 3.00 (36); 40 CPU-h at 0.05 (2).
    assert rows["alice"]["cost"] == 54.0
    # rita, 16 GPUs: 08:00-10:00 at 2.00 (64); 32 CPU-h at 0.05 (1.6).
    assert rows["rita"]["cost"] == 65.6
    assert rows["bob"]["cost"] == 0.0  # A100 has no price yet


def test_grouping_by_day_splits_an_attempt_at_midnight(api, demo, now):
    attempt(9, team=RFM, owner="alice", start=-14, end=-10)  # 22:00 to 02:00
    body = usage(api, group_by="team,day", **{"from": "2026-04-19T00:00:00Z"}).json()
    assert [(r["team"], r["day"], r["gpu_hours"]) for r in body["rows"]] == [
        (RFM, "2026-04-19", 16.0),
        (RFM, "2026-04-20", 16.0),
    ]
    weeks = usage(api, group_by="week", **{"from": "2026-04-19T00:00:00Z"}).json()["rows"]
    # Sunday the 19th ends the week of Monday the 13th.
    assert [(r["week"], r["gpu_hours"]) for r in weeks] == [("2026-04-13", 16.0), ("2026-04-20", 16.0)]


@pytest.mark.parametrize(
    "user, teams",
    [
        ("ops", {RFM, RANKING, VISION}),
        ("rita", {RFM}),
        ("alice", {RFM}),
        ("paul", {RANKING}),
        ("victor", {VISION}),
    ],
)
def test_each_user_sees_their_own_and_their_teams_usage(api, ledger, user, teams):
    assert set(rows_by(usage(api, user).json())) == teams


def test_a_user_who_left_a_team_still_sees_their_own_usage_there(api, ledger):
    Team.objects.get(name=RANKING).memberships.filter(user__username="bob").delete()
    assert set(rows_by(usage(api, "bob", group_by="owner").json(), "owner")) == {"bob"}


def test_another_teams_usage_is_refused(api, ledger):
    response = usage(api, "alice", team=RANKING)
    assert response.status_code == 403
    assert response.json()["detail"] == f"only members of {RANKING}, its leads and site admins may read its usage."
    assert api(None).get("/api/v1/usage").status_code == 401


def test_filters_narrow_the_rows(api, ledger):
    rows = rows_by(usage(api, team=RFM, group_by="owner").json(), "owner")
    assert set(rows) == {"alice", "rita"}
    [row] = usage(api, resource_class="gpu:A100", group_by="resource_class").json()["rows"]
    assert (row["resource_class"], row["gpu_hours"]) == ("gpu:A100", 8.0)
    assert usage(api, priority="P0").json()["rows"] == []


def test_a_division_filter_reads_its_teams_usage(api, ledger):
    rows = rows_by(usage(api, team="research").json())
    assert set(rows) == {RFM, VISION}  # the teams below the division, not "no rows"
    assert rows_by(usage(api, team=RFM).json()).keys() == {RFM}


def test_an_owner_one_may_not_see_reads_as_one_that_does_not_exist(api, ledger):
    for name in ("bob", "nobody"):  # bob exists, in another team than alice's
        response = usage(api, "alice", owner=name)
        assert response.status_code == 400
        assert response.json()["fields"] == {"owner": [f"no user named {name!r}."]}
    assert usage(api, "alice", owner="rita").status_code == 200  # a member of her team
    Team.objects.get(name=RFM).memberships.filter(user__username="rita").delete()  # rita leaves
    assert usage(api, "alice", owner="rita").status_code == 200  # her rows in alice's team still count
    assert usage(api, "ops", owner="bob").status_code == 200  # an admin sees everyone


def test_csv_has_a_line_per_group_and_every_cause_and_outcome(api, ledger):
    response = usage(api, format="csv")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"] == 'attachment; filename="usage-20260420-20260420.csv"'
    lines = response.content.decode().splitlines()
    assert lines[0] == (
        "team,gpu_hours,cpu_hours,cost,lost_gpu_hours,lost_preemption,lost_quota_reclaim,lost_drain,lost_reclaim,"
        "lost_node_loss,lost_not_started,lost_failure,jobs_succeeded,jobs_failed,jobs_preempted,jobs_cancelled,"
        "jobs_early_stopped,jobs_skipped,jobs_requeued,jobs_pending,attempts_succeeded,attempts_failed,attempts_preempted,"
        "attempts_cancelled,attempts_early_stopped,attempts_skipped,attempts_requeued,attempts_pending,"
        "attempts_started,queue_wait_p50_s,queue_wait_p95_s"
    )
    assert lines[1:] == [
        f"{RANKING},8.0,16.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,1,7200.0,7200.0",
        f"{RFM},52.0,72.0,0.0,2.0,2.0,0.0,0.0,0.0,0.0,0.0,0.0,1,0,1,0,0,0,0,0,1,0,1,0,0,0,0,0,1,1800.0,1800.0",
        f"{VISION},0.0,32.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0.0,0,1,0,0,0,0,0,0,0,1,0,0,0,0,0,0,1,10800.0,10800.0",
    ]


@pytest.mark.parametrize(
    "params, field, message",
    [
        ({"from": "last tuesday"}, "from", "Datetime has wrong format."),
        ({"to": "2026-13-01"}, "to", "'2026-13-01' is in the right format but is not a real date and time: month must"),
        ({"from": "2026-02-30"}, "from", "'2026-02-30' is in the right format but is not a real date and time: day is"),
        ({"to": "2026-04-20T24:30Z"}, "to", "'2026-04-20T24:30Z' is in the right format but is not a real date and"),
        ({"to": "2026-04-20T07:00:00Z"}, "to", "must be later than from (2026-04-20T08:00:00+00:00)."),
        ({"group_by": "colour"}, "group_by", "group by one or two of team, owner, resource_class, priority, day, "),
        ({"group_by": "day,week"}, "group_by", "group by one or two of"),
        ({"group_by": "team,owner,day"}, "group_by", "group by one or two of"),
        ({"team": "nobody"}, "team", "no team named 'nobody'."),
        ({"owner": "nobody"}, "owner", "no user named 'nobody'."),
        ({"resource_class": "gpu:TPU"}, "resource_class", "unknown resource class 'gpu:TPU'"),
        ({"priority": "P9"}, "priority", '"P9" is not a valid choice (one of P0, P1, P2, P3).'),
        ({"format": "xml"}, "format", "format is json or csv; got 'xml'."),
        ({"from": "2020-01-01", "group_by": "day"}, "from", "a report by day covers at most 400 days; this one covers"),
        # Days or weeks stepped past the year 9999: they were a 500.
        ({"from": "9999-12-01", "to": "9999-12-31T12:00:00Z", "group_by": "day"}, "to", "must be before the year"),
        ({"from": "2026-04-01", "to": "9999-12-31T12:00:00Z"}, "to", "must be before the year 9000."),
        ({"to": "9999-12-31T12:00:00Z"}, "to", "must be before the year 9000."),  # named from, the default's
        ({"to": "0001-01-02"}, "to", "must be after 1970-01-01."),  # the default from was a 500
        ({"from": "0001-01-01", "to": "2026-04-01"}, "from", "must be after 1970-01-01."),
    ],
)
def test_a_bad_parameter_is_refused_naming_it(api, ledger, params, field, message):
    response = usage(api, **params)
    assert response.status_code == 400, response.content
    assert list(response.json()["fields"]) == [field]
    assert response.json()["fields"][field][0].startswith(message)


def test_a_csv_request_refused_is_answered_in_json_said_to_be_json(api, ledger):
    """A spreadsheet keying on the content type must not read an error as data."""
    for user, params, status in (("ops", {"from": "bad"}, 400), ("victor", {"team": RANKING}, 403)):
        response = usage(api, user, format="csv", **params)
        assert response.status_code == status
        assert response["Content-Type"] == "application/json" and "Content-Disposition" not in response
        assert response.json()["detail"]


def test_a_from_in_the_future_with_no_to_is_from_s_fault(api, ledger):
    response = api("ops").get("/api/v1/usage", {"from": "2026-04-21"})  # NOW is 2026-04-20 12:00
    assert response.status_code == 400
    assert response.json()["fields"] == {
        "from": ["must be before to, which defaults to now (2026-04-20T12:00:00+00:00): give a to later than from."]
    }


def test_admins_set_prices_with_history(api, demo, now):
    body = {"resource_class": "gpu:H100", "gpu_hour": "2.5", "cpu_hour": "0.04", "effective_from": "2026-04-01"}
    response = api("ops").post("/api/v1/prices", body, format="json")
    assert response.status_code == 201, response.json()
    assert response.json() == {
        **response.json(),
        "gpu_hour": "2.5000",
        "effective_from": "2026-04-01T00:00:00Z",
        "set_by_name": "ops",
    }
    later = api("ops").post("/api/v1/prices", {"resource_class": "gpu:H100", "gpu_hour": "3"}, format="json").json()
    assert later["effective_from"] == "2026-04-20T12:00:00Z"  # now, by default
    assert [p["gpu_hour"] for p in api("alice").get("/api/v1/prices").json()] == ["2.5000", "3.0000"]
    assert AuditEvent.objects.filter(kind="PRICE_CHANGED").count() == 2
    assert api("ops").delete(f"/api/v1/prices/{later['id']}").status_code == 204
    assert Price.objects.count() == 1


@pytest.mark.parametrize(
    "body, field",
    [
        ({"resource_class": "gpu:TPU", "gpu_hour": "1"}, "resource_class"),
        ({"resource_class": "cpu", "gpu_hour": "1"}, "gpu_hour"),
        ({"resource_class": "cpu", "cpu_hour": "-1"}, "cpu_hour"),
        ({"resource_class": "cpu", "cpu_hour": "lots"}, "cpu_hour"),
        ({"resource_class": "cpu", "cpu_hour": "1", "effective_from": "soon"}, "effective_from"),
        ({"resource_class": "gpu:H100", "gpu_hour": "1", "effective_from": "2026-04-01T00:00:00Z"}, "effective_from"),
    ],
)
def test_a_bad_price_is_refused_naming_the_field(api, demo, now, body, field):
    Price.objects.create(resource_class="gpu:H100", gpu_hour=1, effective_from=datetime(2026, 4, 1, tzinfo=UTC))
    response = api("ops").post("/api/v1/prices", body, format="json")
    assert response.status_code == 400 and list(response.json()["fields"]) == [field], response.json()
    assert Price.objects.count() == 1


def test_only_admins_set_prices(api, demo, now):
    response = api("rita").post("/api/v1/prices", {"resource_class": "cpu", "cpu_hour": "1"}, format="json")
    assert (response.status_code, response.json()["detail"]) == (403, "only site admins may set or remove prices.")
    price = Price.objects.create(resource_class="cpu", cpu_hour=1, effective_from=NOW)
    assert api("rita").delete(f"/api/v1/prices/{price.pk}").status_code == 403


def test_the_django_admin_sets_a_price_and_audits_it(client, user, now):
    client.force_login(user("ops"))
    form = {"resource_class": "gpu:A100", "gpu_hour": "1.75", "cpu_hour": "0", "effective_from_0": "2026-05-01"}
    response = client.post("/admin/scheduling/price/add/", {**form, "effective_from_1": "00:00:00"})
    assert response.status_code == 302, response.content.decode()[:2000]
    price = Price.objects.get()
    assert (price.resource_class, price.gpu_hour, price.set_by_name) == ("gpu:A100", Decimal("1.75"), "ops")
    assert price.effective_from == datetime(2026, 5, 1, tzinfo=UTC)
    assert (
        AuditEvent.objects.get(kind="PRICE_CHANGED").message
        == "gpu:A100 from 2026-05-01 00:00: 1.75 per GPU-hour, 0 per CPU-hour"
    )
    response = client.post(
        "/admin/scheduling/price/add/", {**form, "resource_class": "gpu:TPU", "effective_from_1": "00:00:00"}
    )
    assert "unknown resource class" in response.content.decode()
