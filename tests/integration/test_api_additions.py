"""The API additions for the CLI (issue 15): YAML bodies, the dry run, "why", PATCH, bulk
cancel and the time filters on the job list."""

from datetime import timedelta

import pytest
import yaml
from django.test import override_settings
from django.utils import timezone

from mlqueue.serializer_fields import UNKNOWN_FIELD
from mlqueue.yaml_body import MAX_YAML_BYTES, MAX_YAML_DEPTH, NOT_A_MAPPING, YAML_ALIASES, YAML_TOO_DEEP
from scheduling.job_changes import (
    ALREADY_CANCELLED,
    EMPTY_FILTER,
    IDS_OR_FILTER,
    MAX_BULK_CANCEL,
    NOT_NOW,
    NOT_VISIBLE,
    NOTHING_TO_CHANGE,
    RUNTIME_ONLY_DOWN,
    TOO_MANY_MATCH,
)
from scheduling.leader.worker import run_pass
from scheduling.models import Job, Node
from scheduling.selectors import NO_VISIBLE_TEAM
from scheduling.services import ALREADY_ENDED, NOT_YOURS_TO_CANCEL, P0_RESERVED
from scheduling.spec import MAX_RUNTIME_RANGE
from scheduling.web.dryrun import NEVER_FITS, WOULD_PREEMPT
from scheduling.web.filters import NOT_A_TIME
from teams.models import AuditEvent
from tests.conftest import make_spec
from tests.integration.test_agent_api import leader  # noqa: F401 (the fixture)
from tests.nodes import cordon, heartbeat

TEAM = "research-foundation-models"


def submit(client, **overrides) -> int:
    overrides.setdefault("client_job_id", None)  # a new job each time, not the seed spec's again
    response = client.post("/api/v1/jobs", make_spec(**overrides), format="json")
    assert response.status_code == 201, response.json()
    return response.json()["id"]


def post_yaml(client, url: str, text: str, content_type: str = "application/yaml"):
    return client.generic("POST", url, text.encode(), content_type=content_type)


# --- YAML bodies ---------------------------------------------------------------------------


@pytest.mark.parametrize("content_type", ["application/yaml", "application/x-yaml", "text/yaml"])
def test_a_yaml_spec_is_submitted_like_its_json(api, content_type):
    response = post_yaml(api("alice"), "/api/v1/jobs", yaml.safe_dump(make_spec()), content_type)
    assert response.status_code == 201, response.json()
    assert response.json()["spec"] == api("alice").get(f"/api/v1/jobs/{response.json()['id']}").json()["spec"]
    assert (response.json()["gpu_count"], response.json()["task_count"]) == (64, 8)


def test_a_yaml_spec_gets_the_same_field_errors(api):
    response = post_yaml(api("alice"), "/api/v1/jobs", yaml.safe_dump(make_spec(gpu_cont=3)))
    assert response.status_code == 400
    assert response.json()["fields"] == {"gpu_cont": [UNKNOWN_FIELD]}


@pytest.mark.parametrize(
    "text, message",
    [
        ("- a\n- b\n", NOT_A_MAPPING.format(kind="a list")),
        ("# only a comment\n", NOT_A_MAPPING.format(kind="empty")),
        ("a: &x 1\nb: *x\n", YAML_ALIASES),
        ("[" * (MAX_YAML_DEPTH + 1) + "]" * (MAX_YAML_DEPTH + 1), YAML_TOO_DEEP.format(limit=MAX_YAML_DEPTH)),
    ],
)
def test_bad_yaml_is_a_400_naming_the_body(api, text, message):
    for url in ("/api/v1/jobs", "/api/v1/jobs/dry-run"):
        response = post_yaml(api("alice"), url, text)
        assert response.status_code == 400
        assert response.json() == {"detail": f"body: {message}", "fields": {"body": [message]}}
    assert not Job.objects.exists()


def test_yaml_on_is_a_key_and_only_true_and_false_are_booleans(api):
    """YAML 1.1 read `on`, `off`, `yes` and `no` as booleans: `notify: {on: [...]}` and
    `depends_on: [{job: .., on: ..}]`, as the docs write them, were "True: unknown field"."""
    first = api("alice").post("/api/v1/jobs", make_spec(), format="json").json()["id"]
    base = {k: v for k, v in make_spec(client_job_id="yaml-on").items() if k not in ("depends_on", "notify", "env")}
    text = yaml.safe_dump(base) + (  # each key once: a key given twice is refused
        f"depends_on: [{{job: {first}, on: any}}]\nnotify: {{on: [started], email: true}}\n"
        "env: {VERBOSE: yes, DAY: 2026-12-01}\n"
    )
    response = post_yaml(api("alice"), "/api/v1/jobs", text)
    assert response.status_code == 201, response.json()
    spec = response.json()["spec"]
    assert spec["depends_on"] == [{"job": first, "on": "any"}]
    assert spec["notify"]["on"] == ["started"]
    assert (spec["env"]["VERBOSE"], spec["env"]["DAY"]) == ("yes", "2026-12-01")


def test_yaml_keys_of_mixed_types_are_unknown_fields_not_a_500(api):
    response = post_yaml(api("alice"), "/api/v1/jobs", yaml.safe_dump(make_spec()) + "1: 2\nfoo: 3\n")
    assert response.status_code == 400
    assert response.json()["fields"] == {"1": [UNKNOWN_FIELD], "foo": [UNKNOWN_FIELD]}
    quota = "reason: r\nquotas:\n  gpu:H100:\n    1: 2\n    x: 3\n"
    response = api("rita").generic(
        "PATCH", "/api/v1/teams/research-foundation-models/quotas", quota.encode(), content_type="application/yaml"
    )
    assert response.status_code == 400, response.content


def test_yaml_syntax_errors_and_bad_bytes_name_the_body(api):
    for raw in (b"team: [unclosed\n", b"team: \xff\n"):
        response = api("alice").generic("POST", "/api/v1/jobs", raw, content_type="application/yaml")
        assert response.status_code == 400 and list(response.json()["fields"]) == ["body"]


def test_too_large_yaml_is_a_413(api):
    text = "name: " + "x" * MAX_YAML_BYTES + "\n"
    assert post_yaml(api("alice"), "/api/v1/jobs", text).status_code == 413
    assert not Job.objects.exists()


# --- dry run -------------------------------------------------------------------------------


def test_a_dry_run_of_a_job_that_fits_says_where_and_writes_nothing(api, fresh_liveness):
    heartbeat()
    spec = make_spec(resources={"gpu_count": 8, "tasks": 1})
    response = api("alice").post("/api/v1/jobs/dry-run", spec, format="json")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["valid"], body["can_ever_run"], body["reason"], body["suggestions"]) == (True, True, None, [])
    assert [node["tasks"] for node in body["placement"]["nodes"]] == [1]
    assert not Job.objects.exists() and not AuditEvent.objects.filter(job__isnull=False).exists()


def test_a_dry_run_waits_on_the_teams_quota_as_a_pass_would(api, fresh_liveness):
    """It said where 56 H100 would go while the team may hold 48: the job then waited for good."""
    heartbeat()
    spec = make_spec(team="research-vision", resources={"gpu_count": 56, "gpu_type": "H100"})
    body = api("victor").post("/api/v1/jobs/dry-run", spec, format="json").json()
    assert (body["can_ever_run"], body["placement"], body["reason"]["code"]) == (True, None, "QUOTA")
    assert body["reason"]["message"] == (
        "this job asks 56 H100, more than team research-vision may ever hold (at most 48: 16 guaranteed + 32 "
        "borrowing limit): it can start only once that quota is raised"
    )
    eight = make_spec(team="research-vision", resources={"gpu_count": 8, "gpu_type": "H100"})
    fits = api("victor").post("/api/v1/jobs/dry-run", eight, format="json").json()
    assert fits["reason"] is None and fits["placement"] is not None


def test_a_p0_dry_run_on_a_full_cluster_says_whom_it_would_preempt(api, leader, fresh_liveness):  # noqa: F811
    """It said INSUFFICIENT_CAPACITY while a real P0 started within seconds by preemption."""
    heartbeat()
    cordon(Node.objects.exclude(name="z1-r1-h100-01"))
    busy = api("alice").post("/api/v1/jobs", make_spec(resources={"gpu_count": 8}), format="json").json()["id"]
    run_pass(epoch=leader)
    assert Job.objects.get(pk=busy).state == "ASSIGNED"
    spec = make_spec(priority="P0", resources={"gpu_count": 8}, client_job_id=None)
    body = api("rita").post("/api/v1/jobs/dry-run", spec, format="json").json()
    assert (body["can_ever_run"], body["placement"], body["reason"]["code"]) == (True, None, "PREEMPTING")
    assert body["reason"]["message"] == WOULD_PREEMPT.format(ids=busy, why="P1 yields to P0")
    p2 = api("rita").post("/api/v1/jobs/dry-run", {**spec, "priority": "P2"}, format="json").json()
    assert p2["reason"]["code"] != "PREEMPTING"  # nobody it outranks
    assert not Job.objects.exclude(pk=busy).exists()  # a dry run writes nothing


def test_a_dry_run_waiting_for_young_victims_gives_no_later_shadow_start(
    clock,
    api,
    leader,  # noqa: F811
    fresh_liveness,
):
    """QA: "1 victim reachable at 23:05 UTC after their 10-minute minimum; reserved 1 node(s),
    estimated start 2026-12-11 22:55 UTC": the reservation's start ignores the preemption."""
    heartbeat()
    cordon(Node.objects.exclude(name="z1-r1-h100-01"))
    young = make_spec(priority="P3", resources={"gpu_count": 8}, max_runtime_hours=168)
    busy = api("alice").post("/api/v1/jobs", young, format="json").json()["id"]
    run_pass(epoch=leader)  # placed at 09:00
    assert Job.objects.get(pk=busy).state == "ASSIGNED"
    spec = make_spec(priority="P1", resources={"gpu_count": 8}, client_job_id=None)
    body = api("alice").post("/api/v1/jobs/dry-run", spec, format="json").json()
    assert body["reason"] == {
        "code": "PREEMPTION_PENDING",
        "category": "capacity",
        "message": "1 victim reachable at 09:10 UTC after their 10-minute minimum; reserved 1 node(s)",
    }


def test_a_dry_run_counts_the_jobs_waiting_ahead_of_it(api, fresh_liveness):
    """It weighed the spec alone: "fits now" on the one free node while an older job of the
    same class and priority, waiting already, would take that node in the next pass."""
    heartbeat()
    cordon(Node.objects.exclude(name="z1-r1-h100-01"))
    spec = make_spec(resources={"gpu_count": 8, "gpu_type": "H100"}, client_job_id=None)
    alone = api("alice").post("/api/v1/jobs/dry-run", spec, format="json").json()
    assert alone["placement"] == {"nodes": [{"node": "z1-r1-h100-01", "tasks": 1}]}
    ahead = submit(api("alice"), resources={"gpu_count": 8, "gpu_type": "H100"}, client_job_id="ahead")
    body = api("alice").post("/api/v1/jobs/dry-run", spec, format="json").json()
    assert (body["can_ever_run"], body["placement"]) == (True, None)
    assert body["reason"]["code"] in {"INSUFFICIENT_CAPACITY", "BEHIND_RESERVATION"}, body["reason"]
    assert list(Job.objects.values_list("pk", flat=True)) == [ahead]  # still nothing written


def test_a_dry_run_in_yaml(api):
    response = post_yaml(api("alice"), "/api/v1/jobs/dry-run", yaml.safe_dump(make_spec()))
    assert response.status_code == 200 and response.json()["valid"] is True


def test_a_dry_run_of_a_job_that_can_never_run_says_why_as_data(api):
    spec = make_spec(resources={"gpu_count": 8000, "tasks": 1000})
    submitted = api("alice").post("/api/v1/jobs", spec, format="json")
    assert submitted.status_code == 400
    field, messages = next(iter(submitted.json()["fields"].items()))
    body = api("alice").post("/api/v1/jobs/dry-run", spec, format="json").json()
    assert (body["can_ever_run"], body["placement"]) == (False, None)
    assert body["reason"] == {"code": NEVER_FITS, "message": messages[0], "field": field}


def test_an_invalid_spec_is_refused_by_the_dry_run_as_by_a_submit(api):
    spec = make_spec(priority="P9")
    submitted = api("alice").post("/api/v1/jobs", spec, format="json")
    dry = api("alice").post("/api/v1/jobs/dry-run", spec, format="json")
    assert (dry.status_code, dry.json()) == (submitted.status_code, submitted.json()) and dry.status_code == 400
    p0 = api("alice").post("/api/v1/jobs/dry-run", make_spec(priority="P0"), format="json")
    assert (p0.status_code, p0.json()["fields"]) == (403, {"priority": [P0_RESERVED.format(name=TEAM)]})


# --- why -----------------------------------------------------------------------------------


def test_why_of_a_pending_job(api):
    job_id = submit(api("alice"))
    Job.objects.filter(pk=job_id).update(
        pending_reason_code="INSUFFICIENT_CAPACITY",
        pending_reason_message="needs 8 nodes with 8 free H100",
        pending_histogram={"histogram": [["fewer than 8 free GPUs", 30]], "fit": "2/32"},
        reserved_nodes=["gpu-001"],
        estimated_start=timezone.now() + timedelta(hours=2),
    )
    body = api("alice").get(f"/api/v1/jobs/{job_id}/why").json()
    assert body["job_id"] == job_id and body["state"] == "PENDING"
    assert body["reason"] == {
        "code": "INSUFFICIENT_CAPACITY",
        "category": "capacity",
        "message": "needs 8 nodes with 8 free H100",
    }
    assert body["histogram"] == {"fit": "2/32", "rejections": [{"why": "fewer than 8 free GPUs", "nodes": 30}]}
    assert body["reservation"] == {"reserved_nodes": ["gpu-001"], "nominated_nodes": []}
    assert body["latest_start"] is not None and body["likely_start"] is None
    assert isinstance(body["suggestions"], list)
    Job.objects.filter(pk=job_id).update(pending_histogram={})
    assert api("alice").get(f"/api/v1/jobs/{job_id}/why").json()["histogram"] is None  # not [] (the schema's null)


def test_why_of_a_job_not_pending_and_of_one_not_visible(api):
    job_id = submit(api("alice"))
    Job.objects.filter(pk=job_id).update(state="RUNNING")
    body = api("alice").get(f"/api/v1/jobs/{job_id}/why").json()
    assert (body["reason"], body["histogram"], body["reservation"], body["suggestions"]) == (None, None, None, [])
    assert body["child_id"] is None
    assert api("paul").get(f"/api/v1/jobs/{job_id}/why").status_code == 404


# --- PATCH ---------------------------------------------------------------------------------


def test_patch_changes_name_priority_and_a_lower_limit_each_audited(api):
    job_id = submit(api("alice"))
    response = api("alice").patch(
        f"/api/v1/jobs/{job_id}", {"name": "renamed", "priority": "P3", "max_runtime_hours": 12}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert (response.json()["name"], response.json()["priority"]) == ("renamed", "P3")
    assert Job.objects.get(pk=job_id).max_runtime_hours == 12
    events = AuditEvent.objects.filter(job_id=job_id, kind="JOB_CHANGED").order_by("id")
    assert [(e.actor_name, e.data["field"], e.data["after"]) for e in events] == [
        ("alice", "name", "renamed"),
        ("alice", "priority", "P3"),
        ("alice", "max_runtime_hours", 12),
    ]
    assert events[1].data["before"] == "P1"


def test_a_member_cannot_raise_to_p0_but_a_lead_can(api):
    job_id = submit(api("alice"))
    response = api("alice").patch(f"/api/v1/jobs/{job_id}", {"priority": "P0"}, format="json")
    assert (response.status_code, response.json()["fields"]) == (403, {"priority": [P0_RESERVED.format(name=TEAM)]})
    assert Job.objects.get(pk=job_id).priority == "P1"
    assert api("rita").patch(f"/api/v1/jobs/{job_id}", {"priority": "P0"}, format="json").json()["priority"] == "P0"


def test_the_time_limit_only_goes_down(api):
    job_id = submit(api("alice"), max_runtime_hours=24)
    response = api("alice").patch(f"/api/v1/jobs/{job_id}", {"max_runtime_hours": 48}, format="json")
    assert response.status_code == 400
    assert response.json()["fields"] == {"max_runtime_hours": [RUNTIME_ONLY_DOWN.format(current=24, asked=48)]}
    Job.objects.filter(pk=job_id).update(state="RUNNING")
    lowered = api("alice").patch(f"/api/v1/jobs/{job_id}", {"max_runtime_hours": 6}, format="json")
    assert lowered.status_code == 200 and lowered.json()["max_runtime_hours"] == 6
    # The limit in force shows (the spec stays as submitted).
    body = api("alice").get(f"/api/v1/jobs/{job_id}").json()
    assert (body["max_runtime_hours"], body["spec"]["max_runtime_hours"]) == (6, 24)
    assert not AuditEvent.objects.filter(job_id=job_id, kind="JOB_CHANGED", data__after=48).exists()


def test_priority_changes_only_while_pending_and_nothing_once_ended(api):
    job_id = submit(api("alice"))
    Job.objects.filter(pk=job_id).update(state="RUNNING")
    response = api("alice").patch(f"/api/v1/jobs/{job_id}", {"priority": "P3"}, format="json")
    assert response.status_code == 409
    assert response.json()["detail"] == NOT_NOW.format(
        job_id=job_id, state="RUNNING", field="priority", states="PENDING"
    )
    Job.objects.filter(pk=job_id).update(state="SUCCEEDED")
    assert api("alice").patch(f"/api/v1/jobs/{job_id}", {"name": "x"}, format="json").status_code == 409


@pytest.mark.parametrize(
    "body, fields",
    [
        ({}, {"body": [NOTHING_TO_CHANGE]}),
        ({"image": "evil"}, {"image": [UNKNOWN_FIELD]}),
        ({"priority": "P9"}, {"priority": ['"P9" is not a valid choice (one of P0, P1, P2, P3).']}),
        ({"max_runtime_hours": 0}, {"max_runtime_hours": [MAX_RUNTIME_RANGE.format(limit=720, value=0.0)]}),
        ({"name": ""}, {"name": ["This field may not be blank."]}),
    ],
)
def test_patch_refusals_name_the_field(api, body, fields):
    job_id = submit(api("alice"))
    response = api("alice").patch(f"/api/v1/jobs/{job_id}", body, format="json")
    assert (response.status_code, response.json()["fields"]) == (400, fields)
    assert not AuditEvent.objects.filter(job_id=job_id, kind="JOB_CHANGED").exists()


def test_patch_by_who_may_not_cancel_is_refused_as_cancel_is_saying_change(api):
    job_id = submit(api("rita"))
    response = api("alice").patch(f"/api/v1/jobs/{job_id}", {"name": "mine now"}, format="json")
    assert response.status_code == 403
    assert response.json() == {
        "detail": NOT_YOURS_TO_CANCEL.format(owner="rita", team=TEAM, job_id=job_id, verb="change")
    }
    assert api("paul").patch(f"/api/v1/jobs/{job_id}", {"name": "x"}, format="json").status_code == 404


def test_patch_in_yaml(api):
    job_id = submit(api("alice"))
    response = api("alice").generic("PATCH", f"/api/v1/jobs/{job_id}", b"name: from-yaml\n", content_type="text/yaml")
    assert (response.status_code, response.json()["name"]) == (200, "from-yaml")


# --- bulk cancel ---------------------------------------------------------------------------


def test_bulk_cancel_by_ids_cancels_mine_and_skips_the_rest(api):
    alice = api("alice")
    mine, done, cancelled = submit(alice), submit(alice), submit(alice)
    ritas, pauls = submit(api("rita")), submit(api("paul"), team="production-ranking")
    Job.objects.filter(pk=done).update(state="SUCCEEDED")
    alice.post(f"/api/v1/jobs/{cancelled}/cancel", {}, format="json")
    response = alice.post(
        "/api/v1/jobs/cancel", {"ids": [mine, done, cancelled, ritas, pauls, mine], "reason": "cleanup"}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert response.json() == {
        "cancelled": [mine],
        "stopping": [],
        "skipped": [
            {"id": done, "why": ALREADY_ENDED.format(job_id=done, state="SUCCEEDED")},
            {"id": cancelled, "why": ALREADY_CANCELLED.format(id=cancelled)},
            {"id": ritas, "why": NOT_YOURS_TO_CANCEL.format(owner="rita", team=TEAM, job_id=ritas, verb="cancel")},
            {"id": pauls, "why": NOT_VISIBLE.format(id=pauls)},
        ],
    }
    assert Job.objects.get(pk=mine).state == "CANCELLED"
    assert AuditEvent.objects.get(job_id=mine, kind="CANCEL_REQUESTED").message == "cleanup"
    assert Job.objects.get(pk=ritas).state == "PENDING"


def test_bulk_cancel_by_filter(api):
    alice = api("alice")
    pending, running, ended = submit(alice), submit(alice), submit(alice)
    ritas = submit(api("rita"))
    Job.objects.filter(pk=running).update(state="RUNNING")
    Job.objects.filter(pk=ended).update(state="SUCCEEDED")
    response = alice.post("/api/v1/jobs/cancel", {"filter": {"owner": "me", "state": "PENDING"}}, format="json")
    assert response.json() == {"cancelled": [pending], "stopping": [], "skipped": []}
    by_team = alice.post("/api/v1/jobs/cancel", {"filter": {"team": TEAM}}, format="json").json()
    assert by_team["cancelled"] == [running]  # asked to stop; the ended job is not matched
    assert by_team["stopping"] == []  # a RUNNING row with no task left to stop ends at once
    assert [skip["id"] for skip in by_team["skipped"]] == [ritas]
    assert AuditEvent.objects.filter(job_id=running, kind="CANCEL_REQUESTED", actor_name="alice").exists()


def test_owner_me_and_a_division_filter_the_list_queue_and_bulk_cancel(api):
    mine, ritas = submit(api("alice")), submit(api("rita"))
    victors = submit(api("victor"), team="research-vision")
    pauls = submit(api("paul"), team="production-ranking")

    def listed(user, path="/api/v1/jobs", **params):
        body = api(user).get(path, params).json()
        return {job["id"] for job in (body["results"] if isinstance(body, dict) else body)}

    assert listed("alice", owner="me") == {mine}  # a token alone says who "me" is
    assert listed("alice", "/api/v1/queue", owner="me") == {mine}
    assert listed("alice", "/api/v1/queue", owner="rita") == {ritas}
    assert listed("ops", team="research") == {mine, ritas, victors}  # the division's teams
    assert listed("ops", "/api/v1/queue", team="research") == {mine, ritas, victors}
    # A team typo, or one whose jobs the caller may not see, is a 400 as in the list (it showed
    # an empty queue), and so is a parameter the queue does not take.
    for user, params in (
        ("alice", {"team": "reserch"}),
        ("alice", {"team": "production-ranking"}),
        ("ops", {"teem": "x"}),
        ("ops", {"cursor": "x"}),
    ):
        response = api(user).get("/api/v1/queue", params)
        assert (response.status_code, list(response.json()["fields"])) == (400, list(params))
    assert pauls in listed("ops", team="production")
    cancelled = api("ops").post("/api/v1/jobs/cancel", {"filter": {"team": "research"}}, format="json").json()
    assert sorted(cancelled["cancelled"]) == sorted([mine, ritas, victors])


@pytest.mark.parametrize(
    "body, fields",
    [
        ({}, {"body": [IDS_OR_FILTER]}),
        ({"ids": [1], "filter": {"owner": "me"}}, {"body": [IDS_OR_FILTER]}),
        ({"filter": {}}, {"filter": [EMPTY_FILTER]}),
        ({"filter": {"owner": "me", "colour": "red"}}, {"filter.colour": [UNKNOWN_FIELD]}),
        ({"filter": {"team": "reserch-vision"}}, {"filter.team": [NO_VISIBLE_TEAM.format(name="reserch-vision")]}),
        ({"ids": []}, {"ids": ["This list may not be empty."]}),
        (
            {"ids": list(range(1, MAX_BULK_CANCEL + 2))},
            {"ids": [f"Ensure this field has no more than {MAX_BULK_CANCEL} elements."]},
        ),
        ({"ids": [1, "2"]}, {"ids.1": ["must be an integer, not the string '2'."]}),
        ({"ids": [True]}, {"ids.0": ["must be an integer, not bool."]}),
        ({"ids": [2**63]}, {"ids.0": ["Ensure this value is less than or equal to 9223372036854775807."]}),
        ({"ids": [0]}, {"ids.0": ["Ensure this value is greater than or equal to 1."]}),
    ],
)
def test_bulk_cancel_refusals_name_the_field(api, body, fields):
    response = api("alice").post("/api/v1/jobs/cancel", body, format="json")
    assert (response.status_code, response.json()["fields"]) == (400, fields)


def test_a_filter_matching_too_many_is_refused(api, monkeypatch):
    monkeypatch.setattr("scheduling.job_changes.MAX_BULK_CANCEL", 2)
    alice = api("alice")
    jobs = [submit(alice) for _ in range(3)]
    response = alice.post("/api/v1/jobs/cancel", {"filter": {"owner": "me"}}, format="json")
    assert (response.status_code, response.json()["fields"]) == (
        400,
        {"filter": [TOO_MANY_MATCH.format(count=3, limit=2)]},
    )
    assert set(Job.objects.filter(pk__in=jobs).values_list("state", flat=True)) == {"PENDING"}


# --- time filters --------------------------------------------------------------------------


@override_settings(MLQ_SUBMIT_RATE="1000/minute")
def test_the_list_filters_by_submit_and_end_times(api, clock):
    alice = api("alice")
    old = submit(alice)
    clock.shift(timedelta(days=2))
    new = submit(alice)
    Job.objects.filter(pk=old).update(state="SUCCEEDED", finished_at=timezone.now())

    def ids(query: str) -> list[int]:
        response = alice.get(f"/api/v1/jobs?{query}")
        assert response.status_code == 200, response.json()
        return [job["id"] for job in response.json()["results"]]

    since = (timezone.now() - timedelta(days=1)).isoformat().replace("+00:00", "Z")
    assert ids(f"submitted_after={since}") == [new]
    assert ids(f"submitted_before={since}") == [old]
    assert ids("submitted_after=1d") == [new]
    assert ids("submitted_after=3d") == [new, old]
    assert ids("ended_after=1h") == [old]


@pytest.mark.parametrize("param", ["submitted_after", "submitted_before", "ended_after"])
def test_a_bad_time_is_a_400_naming_the_parameter(api, param):
    response = api("alice").get(f"/api/v1/jobs?{param}=yesterday")
    assert (response.status_code, response.json()["fields"]) == (400, {param: [NOT_A_TIME]})


@pytest.mark.parametrize(
    "value",
    [
        "2026-01-01",
        "2026-01-01 10:00:00",
        "!!set {a: null}",
        "!!binary aGVsbG8=",
        ".inf",
        ".nan",
        "1" * 5000,
        "{a: [1]}",
    ],
)
@pytest.mark.parametrize("field", ["name", "priority", "max_runtime_hours", "env", "node_selector", "team", "command"])
def test_odd_yaml_values_are_refused_with_a_4xx_not_a_500(api, field, value):
    text = yaml.safe_dump(make_spec(client_job_id=None, **{field: "PLACEHOLDER"})).replace("PLACEHOLDER", value)
    assert post_yaml(api("alice"), "/api/v1/jobs", text).status_code < 500
    assert post_yaml(api("alice"), "/api/v1/jobs/dry-run", text).status_code < 500


@pytest.mark.parametrize("verb", ["cancel", "hold", "requeue"])
def test_a_control_body_with_an_unknown_field_is_refused(api, verb):
    job_id = api("alice").post("/api/v1/jobs", make_spec(client_job_id=f"typo-{verb}"), format="json").json()["id"]
    response = api("alice").post(f"/api/v1/jobs/{job_id}/{verb}", {"reson": "typo"}, format="json")
    assert (response.status_code, response.json()["fields"]) == (400, {"reson": [UNKNOWN_FIELD]})
    assert Job.objects.get(pk=job_id).state == "PENDING" and not Job.objects.get(pk=job_id).held


def test_a_boolean_filter_that_is_neither_true_nor_false_is_a_400(api):
    response = api("alice").get("/api/v1/jobs", {"top_level": "maybe"})
    assert (response.status_code, response.json()["fields"]) == (400, {"top_level": ["true or false, not 'maybe'."]})
    assert api("alice").get("/api/v1/jobs", {"top_level": "true"}).status_code == 200


@pytest.mark.parametrize("verb", ["cancel", "hold"])
def test_a_reason_with_control_or_invisible_characters_is_refused(api, verb):
    """A right-to-left override in a hold reason reversed what followed it in the pending reason."""
    job_id = api("alice").post("/api/v1/jobs", make_spec(client_job_id=f"bidi-{verb}"), format="json").json()["id"]
    response = api("alice").post(f"/api/v1/jobs/{job_id}/{verb}", {"reason": "oops \u202eevil"}, format="json")
    assert response.status_code == 400 and list(response.json()["fields"]) == ["reason"]
    assert Job.objects.get(pk=job_id).state == "PENDING" and not Job.objects.get(pk=job_id).held


def test_a_dry_run_checks_a_schedule_block_and_shows_its_next_fires(api, clock):
    body = {**make_spec(client_job_id=None), "schedule": {"cron": "0 3 * * *", "timezone": "UTC"}}
    response = api("alice").post("/api/v1/jobs/dry-run", body, format="json")
    assert response.status_code == 200, response.json()
    answer = response.json()
    assert answer["valid"] is True
    assert answer["schedule"]["cron"] == "0 3 * * *"
    assert len(answer["schedule"]["next_fires"]) == 3
    assert [fire[11:19] for fire in answer["schedule"]["next_fires"]] == ["03:00:00"] * 3
    bad = api("alice").post(
        "/api/v1/jobs/dry-run", {**body, "schedule": {"cron": "61 * * * *", "timezone": "UTC"}}, format="json"
    )
    assert bad.status_code == 400 and "schedule.cron" in bad.json()["fields"]
    assert Job.objects.count() == 0


def test_a_task_killed_by_a_signal_says_which_in_the_api(api, leader):  # noqa: F811
    """The API showed exit_code null and nothing else for a task ended by SIGKILL, though the
    agent had reported the signal (found by QA)."""
    from scheduling import reports
    from scheduling.leader.worker import run_pass as one_pass

    heartbeat()
    job_id = submit(api("alice"), resources={"gpu_count": 8}, restart_policy={"max_retries": 0})
    one_pass(epoch=leader)
    task = Job.objects.get(pk=job_id).tasks.get()
    reports.do_report_started(job_id=job_id, rank=0, attempt=task.attempt)
    reports.do_report_exited(job_id=job_id, rank=0, attempt=task.attempt, exit_code=None, signal="SIGKILL")
    body = api("alice").get(f"/api/v1/jobs/{job_id}").json()
    assert [(t["exit_code"], t["exit_signal"]) for t in body["tasks"]] == [(None, "SIGKILL")]


def test_dry_runs_have_a_rate_of_their_own(api, settings):
    """A dry run is a pass over the whole waiting queue: a loop of them is bounded, and they
    spend none of the submit rate (found in review)."""
    settings.MLQ_DRY_RUN_RATE = "2/minute"
    spec = make_spec(client_job_id=None)
    answers = [api("alice").post("/api/v1/jobs/dry-run", spec, format="json") for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert answers[2].json()["detail"].startswith("too many dry runs: at most 2 per minute per user; retry in ")
    assert api("alice").post("/api/v1/jobs", spec, format="json").status_code == 201
