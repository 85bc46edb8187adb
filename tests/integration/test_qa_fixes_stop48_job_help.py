"""QA stop 48: the job page's "What would help?" of a job waiting for its team's quota said "It
does not wait for room ... No change to its shape starts it sooner." and then "asking 32 H100 or
fewer ... would start it sooner" (a change to its shape). Where room is short too, it said that
it did not wait for room and then that it did. A quota wait is now said once, by its help."""

import html

import pytest

from scheduling.models import Job
from scheduling.web.explanations import what_would_help
from tests.conftest import make_spec
from tests.nodes import heartbeat

# 6 H100 left under the team's limit: asking 6 or fewer fits it.
NEAR_LIMIT = (
    "team research-foundation-models uses 90 H100 (at most 96: 32 guaranteed + 64 borrowing limit); "
    "this job needs 2 more"
)


@pytest.mark.parametrize("nodes_up", [True, False])
def test_a_quota_wait_s_help_does_not_contradict_itself(api, logged_in, nodes_up):
    if nodes_up:  # room for it: "not for room"; no node up: "and for room (0 H100 free)"
        heartbeat()
    spec = make_spec(client_job_id=None, resources={"gpu_count": 8})
    job_id = api("alice").post("/api/v1/jobs", spec, format="json").json()["id"]
    Job.objects.filter(pk=job_id).update(pending_reason_code="QUOTA", pending_reason_message=NEAR_LIMIT)
    page = html.unescape(logged_in("alice").get(f"/jobs/{job_id}/help/").content.decode())
    said = what_would_help(Job.objects.get(pk=job_id)).suggestions[0]
    assert ("asking 6 H100 or fewer" in said) is nodes_up  # a change to its shape helps: not to be denied
    assert ("and for room" in said) is not nodes_up
    assert f"It waits for this: {NEAR_LIMIT}." in page and said[0].upper() + said[1:] + "." in page
    assert "No change to its shape" not in page and "does not wait for room" not in page


def test_a_wait_that_is_not_the_quota_still_says_no_reshape_helps(api, logged_in):
    spec = make_spec(client_job_id=None, resources={"gpu_count": 8})
    job_id = api("alice").post("/api/v1/jobs", spec, format="json").json()["id"]
    Job.objects.filter(pk=job_id).update(held=True, held_by_name="alice", held_reason="not yet")
    page = html.unescape(logged_in("alice").get(f"/jobs/{job_id}/help/").content.decode())
    assert "It does not wait for room on the nodes but for this:" in page
    assert "No change to its shape starts it sooner." in page
