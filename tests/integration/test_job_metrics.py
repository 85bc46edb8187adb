"""Metrics a job reports, from the agent's `metric` events to the API and the job page: stored
once however often resent, refused from another node, capped per attempt with one timeline
note, the group's parent stamped; `GET /api/v1/jobs/{id}/metrics` for visible jobs only, with
its filters and bounds."""

from datetime import UTC, datetime

import pytest

from scheduling import job_metrics
from scheduling.leader.worker import run_pass
from scheduling.models import Job, JobMetric, Node, Task
from scheduling.web import pages
from teams.models import AuditEvent
from tests.integration.test_agent_api import INVENTORY, JOIN, agent, beat
from tests.integration.test_checkpoints import running_job
from tests.nodes import cordon

A, B = "z1-r1-h100-01", "z1-r1-h100-02"
T0 = datetime(2026, 5, 4, 9, 0, tzinfo=UTC).timestamp()


@pytest.fixture(autouse=True)
def agent_settings(settings, fresh_liveness):
    settings.MLQ_AGENT_JOIN_TOKEN = JOIN


def metric(job_id, seq, step, *, rank=0, attempt=1, at=None, **values) -> dict:
    return {
        "type": "metric",
        "job_id": job_id,
        "rank": rank,
        "attempt": attempt,
        "seq": seq,
        "step": step,
        "time": T0 + seq if at is None else at,
        "values": values,
    }


def send(client, node, *events) -> dict:
    response = client.post(f"/api/v1/agents/{node}/events", {"events": list(events)}, format="json")
    assert response.status_code == 200, response.json()
    return response.json()


def stored(job_id) -> list[tuple]:
    return list(
        JobMetric.objects.filter(job_id=job_id)
        .order_by("seq", "name")
        .values_list("rank", "attempt", "seq", "step", "name", "value")
    )


def test_reports_are_stored_one_row_per_value_and_a_resend_changes_nothing(api, leader):
    job_id, clients = running_job(api, leader, checkpoint=False)
    batch = [metric(job_id, 1, 10, val_loss=0.9, acc=0.5), metric(job_id, 2, 20, val_loss=0.7)]
    assert send(clients[A], A, *batch) == {"accepted": 2, "refused": []}
    assert send(clients[A], A, *batch, metric(job_id, 3, 30, val_loss=0.6)) == {"accepted": 3, "refused": []}
    assert stored(job_id) == [
        (0, 1, 1, 10, "acc", 0.5),
        (0, 1, 1, 10, "val_loss", 0.9),
        (0, 1, 2, 20, "val_loss", 0.7),
        (0, 1, 3, 30, "val_loss", 0.6),
    ]
    row = JobMetric.objects.get(job_id=job_id, seq=2)
    assert row.reported_at == datetime.fromtimestamp(T0 + 2, UTC)
    assert Job.objects.get(pk=job_id).metrics_changed_at is not None


def test_a_report_is_refused_from_another_node_and_for_another_attempt(api, leader):
    job_id, clients = running_job(api, leader, checkpoint=False)
    other = agent(B, {**INVENTORY, "address": "10.0.0.2"})
    beat(other, B)
    answer = send(other, B, metric(job_id, 1, 1, loss=1.0))
    assert answer == {
        "accepted": 0,
        "refused": [{"index": 0, "reason": f"job {job_id} rank 0 is not placed on node {B}."}],
    }
    answer = send(clients[A], A, metric(job_id, 1, 1, attempt=2, loss=1.0))
    assert answer["refused"] == [
        {"index": 0, "reason": f"job {job_id} rank 0 is at attempt 1 on this node, not attempt 2."}
    ]
    assert stored(job_id) == []


@pytest.mark.parametrize(
    "change, field, message",
    [
        ({"values": {}}, "values", "a report needs at least one metric, e.g. report(step=1, loss=0.5)"),
        (
            {"values": {"bad name": 1}},
            "values",
            "metric name 'bad name': use letters, digits, '_', '.', '/' and '-' (at most 100, e.g. val_loss, eval/acc)",
        ),
        ({"values": {"loss": "0.5"}}, "values", "metric 'loss': '0.5' is not a finite number"),
        ({"values": {f"m{i}": 1 for i in range(65)}}, "values", "a report holds at most 64 metrics, not 65"),
        ({"seq": 0}, "seq", "Ensure this value is greater than or equal to 1."),
        ({"step": -1}, "step", "Ensure this value is greater than or equal to 0."),
        ({"seq": None}, "seq", "required in a metric event."),
        ({"time": None}, "time", "required in a metric event."),
    ],
)
def test_a_malformed_metric_event_is_a_400_naming_the_field(api, leader, change, field, message):
    job_id, clients = running_job(api, leader, checkpoint=False)
    event = {**metric(job_id, 1, 1, loss=1.0), **change}
    response = clients[A].post(f"/api/v1/agents/{A}/events", {"events": [event]}, format="json")
    assert response.status_code == 400
    assert message in str(response.json()), response.json()
    assert field in str(response.json())


def test_past_the_cap_reports_are_dropped_and_the_timeline_says_so_once(api, leader, settings):
    settings.MLQ_MAX_METRIC_REPORTS = 2
    job_id, clients = running_job(api, leader, checkpoint=False)
    send(clients[A], A, *(metric(job_id, seq, seq, loss=float(seq)) for seq in (1, 2, 3, 4)))
    send(clients[A], A, metric(job_id, 5, 5, loss=5.0))
    send(clients[A], A, metric(job_id, 1, 1, loss=1.0))  # a resend below the cap is still welcome
    assert [row[2] for row in stored(job_id)] == [1, 2]
    notes = AuditEvent.objects.filter(job_id=job_id, reason=job_metrics.CAPPED)
    assert [(n.message, n.data) for n in notes] == [
        (
            "rank 0 attempt 1: metric reports past line 2 of its metrics file are not kept; "
            "the file on the node has them",
            {"rank": 0, "attempt": 1},
        )
    ]


def test_a_skipped_metrics_line_is_on_the_jobs_timeline_once(api, leader):
    """QA: bad lines of a metrics file (NaN, a string, a float step) vanished, said only in the
    node agent's log. The agent sends the first few; the job's timeline shows each, once."""
    job_id, clients = running_job(api, leader, checkpoint=False)
    skipped = {"type": "metric_skipped", "job_id": job_id, "rank": 0, "attempt": 1}
    first = {**skipped, "seq": 2, "data": "metric 'loss': nan is not a finite number"}
    last = {**skipped, "seq": 9, "data": "not JSON", "last": True}
    send(clients[A], A, first, first, last)
    send(clients[A], A, first)  # a resend
    events = AuditEvent.objects.filter(job_id=job_id, reason="METRICS_SKIPPED").order_by("id")
    assert [(e.actor_name, e.message, e.data) for e in events] == [
        (
            f"agent:{A}",
            "rank 0 attempt 1: line 2 of its metrics file skipped: metric 'loss': nan is not a finite number",
            {"rank": 0, "attempt": 1, "line": 2},
        ),
        (
            f"agent:{A}",
            "rank 0 attempt 1: line 9 of its metrics file skipped: not JSON; later bad lines are skipped too, "
            "without a word here (the node agent's log counts them)",
            {"rank": 0, "attempt": 1, "line": 9},
        ),
    ]
    response = clients[A].post(f"/api/v1/agents/{A}/events", {"events": [{**skipped, "data": "x"}]}, format="json")
    assert response.status_code == 400 and "required in a metric_skipped event." in str(response.json())


def test_a_childs_report_stamps_its_groups_parent(api, leader):
    client = agent(A, INVENTORY)
    beat(client, A)
    cordon(Node.objects.exclude(name=A))
    response = api("alice").post(
        "/api/v1/jobs",
        {
            "team": "research-foundation-models",
            "name": "sweep",
            "command": ["python", "train.py", "--lr", "{lr}"],
            "resources": {"gpu_count": 1, "gpu_type": "H100"},
            "topology_hint": "none",
            "sweep": {
                "method": "grid",
                "parameters": {"lr": [0.1, 0.01]},
                "metric": {"name": "loss", "goal": "minimize"},
            },
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    parent = Job.objects.get(pk=response.json()["id"])
    run_pass(epoch=leader)
    child = Task.objects.get(job__parent=parent, node__name=A, rank=0, job__group_index=0).job
    assert Job.objects.get(pk=parent.pk).metrics_changed_at is None
    send(client, A, metric(child.pk, 1, 5, loss=0.25))
    parent.refresh_from_db()
    assert parent.metrics_changed_at is not None
    assert parent.metrics_changed_at == Job.objects.get(pk=child.pk).metrics_changed_at

    answer = api("alice").get(f"/api/v1/jobs/{parent.pk}/metrics").json()
    assert answer["series"] == {}
    assert answer["children"] == {
        str(child.pk): {
            "loss": [{"step": 5, "value": 0.25, "time": "2026-05-04T09:00:01+00:00", "attempt": 1, "rank": 0}]
        }
    }
    trials = api("alice").get(f"/api/v1/jobs/{parent.pk}/children").json()
    assert trials[0]["id"] == child.pk and trials[0]["metric"]["best"] == 0.25  # sweeps.py reads the same rows


def point(step, value, *, seq, attempt=1, rank=0) -> dict:
    return {
        "step": step,
        "value": value,
        "time": datetime.fromtimestamp(T0 + seq, UTC).isoformat(),
        "attempt": attempt,
        "rank": rank,
    }


def test_the_api_returns_the_series_in_step_order_with_filters(api, leader):
    job_id, clients = running_job(api, leader, checkpoint=False)
    send(
        clients[A],
        A,
        metric(job_id, 1, 30, val_loss=0.5, acc=0.8),
        metric(job_id, 2, 10, val_loss=0.9),
        metric(job_id, 3, 20, val_loss=0.7, acc=0.6),
    )
    answer = api("alice").get(f"/api/v1/jobs/{job_id}/metrics").json()
    assert answer == {
        "job_id": job_id,
        "series": {
            "acc": [point(20, 0.6, seq=3), point(30, 0.8, seq=1)],
            "val_loss": [point(10, 0.9, seq=2), point(20, 0.7, seq=3), point(30, 0.5, seq=1)],
        },
        "children": {},
        "truncated": [],
        "points_per_series": 5000,
    }
    assert list(api("alice").get(f"/api/v1/jobs/{job_id}/metrics?name=acc").json()["series"]) == ["acc"]
    assert api("alice").get(f"/api/v1/jobs/{job_id}/metrics?rank=0&name=nope").json()["series"] == {}
    assert api("alice").get(f"/api/v1/jobs/{job_id}/metrics?rank=0&attempt=1").json()["series"]["acc"][0]["step"] == 20
    after = api("alice").get(f"/api/v1/jobs/{job_id}/metrics?after_step=10&name=val_loss").json()
    assert [p["step"] for p in after["series"]["val_loss"]] == [20, 30]


@pytest.mark.parametrize(
    "query, field",
    [
        ("name=val%20loss", "name"),
        ("rank=-1", "rank"),
        ("attempt=0", "attempt"),
        ("after_step=x", "after_step"),
        ("after_step=99999999999999999999", "after_step"),
    ],
)
def test_a_bad_query_is_a_400_naming_the_parameter(api, leader, query, field):
    job_id, _ = running_job(api, leader, checkpoint=False)
    response = api("alice").get(f"/api/v1/jobs/{job_id}/metrics?{query}")
    assert response.status_code == 400 and field in response.json()["fields"], response.json()


def test_a_series_is_cut_at_its_bound_and_says_so(api, leader):
    job_id, clients = running_job(api, leader, checkpoint=False)
    send(clients[A], A, *(metric(job_id, seq, seq * 10, loss=float(seq), acc=1.0) for seq in range(1, 6)))
    found, cut = job_metrics.metric_series([job_id], per_series=3)
    assert [p["step"] for p in found[job_id]["loss"]] == [10, 20, 30]
    assert cut == [{"job_id": job_id, "name": "acc"}, {"job_id": job_id, "name": "loss"}]
    found, cut = job_metrics.metric_series([job_id], total=4)
    assert [len(points) for points in found[job_id].values()] == [4]  # by name: acc's first four
    assert cut == [{"job_id": job_id, "name": "acc"}, {"job_id": job_id, "name": "loss"}]  # loss: left out, named


def test_a_long_series_is_spread_over_its_whole_run_for_a_chart(api, leader, logged_in, monkeypatch):
    """QA: the job page's chart held a run's first 2,000 points, and its live reload the API's
    first 5,000: a long run's curve stopped moving. `spread` thins every series to every k-th
    point over the whole run, its last one kept."""
    job_id, clients = running_job(api, leader, checkpoint=False)
    send(clients[A], A, *(metric(job_id, seq, seq * 10, loss=float(seq)) for seq in range(1, 24)))
    send(clients[A], A, *(metric(job_id, seq, seq * 10, acc=1.0) for seq in range(24, 27)))
    found, cut = job_metrics.metric_series([job_id], spread=5)
    assert [p["step"] for p in found[job_id]["loss"]] == [10, 60, 110, 160, 210, 230]  # k = 5, then the last
    assert [p["step"] for p in found[job_id]["acc"]] == [240, 250, 260]  # short: whole
    assert cut == []
    answer = api("alice").get(f"/api/v1/jobs/{job_id}/metrics?spread=4&name=loss").json()
    assert [p["step"] for p in answer["series"]["loss"]] == [10, 70, 130, 190, 230]  # k = 6
    for bad in ("spread=1", "spread=5001", "spread=x"):
        response = api("alice").get(f"/api/v1/jobs/{job_id}/metrics?{bad}")
        assert response.status_code == 400 and "spread" in response.json()["fields"], bad
    monkeypatch.setattr(pages, "METRIC_CHART_POINTS", 10)
    html = logged_in("alice").get(f"/jobs/{job_id}/").content.decode()
    assert '"loss": [[10, 1.0], [40, 4.0], [70, 7.0]' in html and "[230, 23.0]]" in html  # k = 3, the last kept
    assert "A long series is drawn at about 10 points" in html
    assert f'data-metrics-url="/api/v1/jobs/{job_id}/metrics?spread=10"' in html


def test_metrics_of_a_job_you_cannot_see_are_a_404(api, leader):
    job_id, clients = running_job(api, leader, checkpoint=False)
    send(clients[A], A, metric(job_id, 1, 1, loss=1.0))
    assert api("victor").get(f"/api/v1/jobs/{job_id}/metrics").status_code == 404
    assert api("victor").get("/api/v1/jobs/999999/metrics").status_code == 404
    assert api(None).get(f"/api/v1/jobs/{job_id}/metrics").status_code in (401, 403)


def test_the_schema_lists_the_metrics_endpoint(api):
    schema = api("alice").get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    operation = schema["paths"]["/api/v1/jobs/{job_id}/metrics/"]["get"]
    assert {p["name"] for p in operation["parameters"]} >= {"job_id", "name", "rank", "attempt", "after_step", "spread"}
    body = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    assert set(schema["components"]["schemas"][body]["properties"]) == {
        "job_id",
        "series",
        "children",
        "truncated",
        "points_per_series",
    }


def test_the_job_page_draws_the_metrics_and_lists_their_last_values(api, leader, logged_in):
    job_id, clients = running_job(api, leader, checkpoint=False)
    send(clients[A], A, metric(job_id, 1, 1, loss=0.9), metric(job_id, 2, 2, loss=0.4, acc=0.75))
    html = logged_in("alice").get(f"/jobs/{job_id}/").content.decode()
    series = '{"acc": [[2, 0.75]], "loss": [[1, 0.9], [2, 0.4]]}'  # by name, each in step order
    assert f'<script id="metric-series" type="application/json">{series}</script>' in html
    assert "vendor/chart-4.6.1.umd.min.js" in html and "js/metrics.js" in html and "cdn" not in html.lower()
    assert "<tr><td>acc</td><td>0.75</td><td>2</td><td>1</td><td>0</td></tr>" in html
    assert "<tr><td>loss</td><td>0.4</td><td>2</td><td>1</td><td>0</td></tr>" in html
    assert 'data-live-refresh="#job-panel"' in html  # the live update is still there


def test_the_job_page_without_metrics_says_how_to_report_them(api, leader, logged_in):
    job_id, _ = running_job(api, leader, checkpoint=False)
    html = logged_in("alice").get(f"/jobs/{job_id}/").content.decode()
    assert 'id="metrics-none"' in html and "mlqueue.report(step=..., val_loss=...)" in html
    assert '<script id="metric-series" type="application/json">{}</script>' in html


def test_a_batch_of_reports_costs_the_same_few_queries_whatever_its_size(api, leader, django_assert_max_num_queries):
    job_id, clients = running_job(api, leader, checkpoint=False)
    batch = [metric(job_id, seq, seq, loss=1.0 / seq, acc=0.5, lr=1e-3) for seq in range(1, 201)]
    with django_assert_max_num_queries(7) as counted:  # the token, the node, its attempts, one insert, the stamps
        send(clients[A], A, *batch)
    assert JobMetric.objects.filter(job_id=job_id).count() == 600
    small = len(counted.captured_queries)
    with django_assert_max_num_queries(small) as again:
        send(clients[A], A, metric(job_id, 201, 201, loss=0.1))
    assert len(again.captured_queries) == small
