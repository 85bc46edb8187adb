"""What a QUOTA wait is told would help, by the limit its reason names, and the parent team's
figures left out of reasons where quotas are private (both found by QA)."""

import pytest
from django.test import override_settings

from scheduling.cluster import policy_config
from scheduling.models import Job, Node
from scheduling.web.explanations import CEILING_HELP, NOTHING_IDLE_HELP, Asked, quota_help
from tests.conftest import make_spec
from tests.integration.test_maintenance import window_body
from tests.nodes import heartbeat

AT_LIMIT = (
    "team research-foundation-models uses 96 H100 (at most 96: 32 guaranteed + 64 borrowing limit); "
    "this job needs 1 more"
)
UNDER = "team research-vision uses 24 H100 (at most 28: 8 guaranteed + 20 borrowing limit); this job needs 8 more"
PARENT = (
    "element 3: parent team research uses 16 H100 (at most 20: 8 guaranteed + 12 borrowing limit); "
    "this job needs 8 more"
)
PRIVATE_PARENT = "parent team research has reached its borrowing limit of H100; this job needs 8 more"
OVER = (
    "team research-foundation-models uses 96 H100 (at most 64: 32 guaranteed + 32 borrowing limit); "
    "this job needs 1 more"
)
PARENT_OVER = (
    "parent team research uses 72 H100 (at most 51: 24 guaranteed + 27 borrowing limit); this job needs 8 more"
)
IDLE = "team research-vision at 24/24 guaranteed H100, nothing idle to borrow (needs 8, {free} free)"
ROOM_WAIT = "it waits for its team's quota and for room ({free} H100 free)"
NO_ROOM = "; a higher borrowing limit would not, with no room for it"


def asked(units: int, *, free: int, fewest: int = 1) -> Asked:
    return Asked(units=units, fewest=fewest, unit="H100", free=free)


@pytest.mark.parametrize(
    ("message", "job", "said"),
    [
        # A 1-GPU job asks the fewest it can; room is free, so only a higher limit helps.
        (
            AT_LIMIT,
            asked(1, free=40),
            "it waits for its team's quota, not for room: a higher borrowing limit from a lead of its team would start"
            " it sooner",
        ),
        # Every H100 in use: a higher limit would not start it either.
        (
            AT_LIMIT,
            asked(1, free=0),
            f"{ROOM_WAIT.format(free=0)}: it starts as its team's running jobs end, or as room frees up{NO_ROOM}",
        ),
        (
            UNDER,
            asked(8, free=40),
            "it waits for its team's quota, not for room: asking 4 H100 or fewer, or a higher borrowing limit from a"
            " lead of its team, would start it sooner",
        ),
        # 4 more fit under the limit, but only 2 are free.
        (UNDER, asked(8, free=2), f"{ROOM_WAIT.format(free=2)}: asking 2 H100 or fewer would start it sooner{NO_ROOM}"),
        # Two tasks ask at least one GPU each: 4 fit, but not 1.
        (
            UNDER.replace("at most 28: 8 guaranteed + 20", "at most 25: 8 guaranteed + 17"),
            asked(8, free=40, fewest=2),
            "it waits for its team's quota, not for room: a higher borrowing limit from a lead of its team would start"
            " it sooner",
        ),
        (
            OVER,
            asked(1, free=40),
            "team research-foundation-models uses more than its limit (96 of 64 H100: the limit was lowered below its"
            " use): it waits until its running jobs bring its use down to 63 H100 or less; neither fewer GPUs nor more"
            " room would start it sooner",
        ),
        (
            PARENT_OVER,
            asked(8, free=40),
            "parent team research uses more than its limit (72 of 51 H100: the limit was lowered below its use): it"
            " waits until its running jobs bring its use down to 43 H100 or less; neither fewer GPUs nor more room"
            " would start it sooner",
        ),
        (
            PARENT,
            asked(8, free=40),
            "it waits for the quota of team research (above its team), not for room: asking 4 H100 or fewer, or a"
            " higher borrowing limit for research from a lead of research (or above), would start it sooner",
        ),
        (
            PARENT,
            asked(8, free=0),
            "it waits for the quota of team research (above its team) and for room (0 H100 free): it starts as the"
            f" running jobs of team research end, or as room frees up{NO_ROOM}",
        ),
        # Private figures: no count can be said to fit.
        (
            PRIVATE_PARENT,
            asked(8, free=40),
            "it waits for the quota of team research (above its team), not for room: a higher borrowing limit for"
            " research from a lead of research (or above) would start it sooner",
        ),
        (
            "this job asks 56 H100, more than team research-vision may ever hold (at most 48: 16 guaranteed + 32 "
            "borrowing limit): it can start only once that quota is raised",
            asked(56, free=40),
            CEILING_HELP.format(team="its team"),
        ),
        (
            "this job asks 24 H100, more than parent team research may ever hold: it can start only once that quota"
            " is raised",
            asked(24, free=40),
            CEILING_HELP.format(team="team research"),
        ),
        (IDLE.format(free=0), asked(8, free=0), NOTHING_IDLE_HELP),
        (IDLE.format(free=3), asked(8, free=3), f"{NOTHING_IDLE_HELP}, asking 3 H100 or fewer might"),
        (IDLE.format(free=3), asked(8, free=3, fewest=4), NOTHING_IDLE_HELP),
    ],
)
def test_what_would_help_a_quota_wait_is_only_what_would(message, job, said):
    """QA: a 1-GPU job at its team's limit was told asking fewer GPUs would start it sooner; so
    was a team over its lowered limit, and a job with every H100 in use a higher limit; and a
    job with nothing idle to borrow "asking no more GPUs than are free might" with 0 free."""
    assert quota_help(message, job) == said


def test_why_of_a_1_gpu_job_at_its_limit_offers_only_a_higher_limit(api, demo):
    """The API's (and so `mlq why`'s) answer: the job's own shape and the free room now."""
    heartbeat()
    body = make_spec(resources={"gpu_count": 1, "gpu_type": "H100"})
    job_id = api("alice").post("/api/v1/jobs", body, format="json").json()["id"]
    Job.objects.filter(pk=job_id).update(pending_reason_code="QUOTA", pending_reason_message=AT_LIMIT)
    said = api("alice").get(f"/api/v1/jobs/{job_id}/why").json()["suggestions"]
    assert said == [
        "it waits for its team's quota, not for room: a higher borrowing limit from a lead of its team would start it"
        " sooner"
    ]


def test_free_room_in_a_maintenance_window_the_job_would_reach_is_not_room_for_it(api, demo, clock):
    """QA: with every free H100 in a window the job's time limit runs into, it was told a higher
    limit would start it sooner; the room it may start on is 0."""
    heartbeat()
    for zone in sorted(set(Node.objects.filter(gpu_type="H100").values_list("zone", flat=True))):
        response = api("ops").post("/api/v1/maintenance", {**window_body(rack=""), "zone": zone}, format="json")
        assert response.status_code == 201, response.json()
    body = make_spec(resources={"gpu_count": 1, "gpu_type": "H100"}, max_runtime_hours=48)
    job_id = api("alice").post("/api/v1/jobs", body, format="json").json()["id"]
    Job.objects.filter(pk=job_id).update(pending_reason_code="QUOTA", pending_reason_message=AT_LIMIT)
    said = api("alice").get(f"/api/v1/jobs/{job_id}/why").json()["suggestions"]
    assert said == [
        f"{ROOM_WAIT.format(free=0)}: it starts as its team's running jobs end, or as room frees up{NO_ROOM}"
    ]
    Job.objects.filter(pk=job_id).update(max_runtime_hours=1)  # ends before the windows: the room is its
    said = api("alice").get(f"/api/v1/jobs/{job_id}/why").json()["suggestions"]
    assert said[0].startswith("it waits for its team's quota, not for room")


def test_the_live_policy_names_parent_figures_only_while_quotas_are_public():
    assert policy_config().parent_quota_figures is True
    with override_settings(MLQ_QUOTAS_PUBLIC=False):
        assert policy_config().parent_quota_figures is False
