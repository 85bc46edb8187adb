"""A PATCH of a job takes an optional reason, as hold, cancel and requeue do: a priority raised
for an incident said so nowhere ("reason: unknown field", found by QA)."""

import pytest

from mlqueue.text import INVISIBLE
from scheduling.job_changes import NOTHING_TO_CHANGE, REASON_LENGTH
from scheduling.models import Job
from teams.models import AuditEvent, EventKind
from tests.conftest import make_spec


def submit(client) -> int:
    response = client.post("/api/v1/jobs", make_spec(client_job_id=None), format="json")
    assert response.status_code == 201, response.json()
    return response.json()["id"]


def changes(job_id: int) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(job_id=job_id, kind=EventKind.JOB_CHANGED).order_by("id"))


def test_a_priority_change_carries_its_reason_into_the_event(api):
    job_id = submit(api("alice"))
    response = api("rita").patch(f"/api/v1/jobs/{job_id}", {"priority": "P0", "reason": "incident 4711"}, "json")
    assert (response.status_code, response.json()["priority"]) == (200, "P0")
    (event,) = changes(job_id)
    assert event.message == "priority changed from 'P1' to 'P0' by rita: incident 4711"
    assert event.data == {"field": "priority", "before": "P1", "after": "P0", "reason": "incident 4711"}
    events = api("alice").get(f"/api/v1/jobs/{job_id}/events").json()
    assert any(row["message"].endswith(": incident 4711") for row in events["results"])


def test_the_reason_stays_optional(api):
    job_id = submit(api("alice"))
    assert api("alice").patch(f"/api/v1/jobs/{job_id}", {"priority": "P3"}, "json").status_code == 200
    (event,) = changes(job_id)
    assert event.message == "priority changed from 'P1' to 'P3' by alice" and "reason" not in event.data


@pytest.mark.parametrize(
    "reason, message",
    [
        ("x" * (REASON_LENGTH + 1), f"Ensure this field has no more than {REASON_LENGTH} characters."),
        ("bell\x07", INVISIBLE.format(char="U+0007 CONTROL CHARACTER")),
        ("\u202eevil", INVISIBLE.format(char="U+202E RIGHT-TO-LEFT OVERRIDE")),
        (7, None),
    ],
    ids=["too long", "control character", "bidi override", "not a string"],
)
def test_a_bad_reason_is_a_400_naming_it_and_changes_nothing(api, reason, message):
    job_id = submit(api("alice"))
    response = api("alice").patch(f"/api/v1/jobs/{job_id}", {"priority": "P3", "reason": reason}, "json")
    assert response.status_code == 400 and list(response.json()["fields"]) == ["reason"]
    if message is not None:
        assert response.json()["fields"]["reason"] == [message]
    assert Job.objects.get(pk=job_id).priority == "P1" and not changes(job_id)


def test_a_reason_alone_changes_nothing(api):
    job_id = submit(api("alice"))
    response = api("alice").patch(f"/api/v1/jobs/{job_id}", {"reason": "just because"}, "json")
    assert (response.status_code, response.json()["fields"]) == (400, {"body": [NOTHING_TO_CHANGE]})
    assert not changes(job_id)


def test_a_reason_with_no_actual_change_writes_nothing(api):
    job_id = submit(api("alice"))
    response = api("alice").patch(f"/api/v1/jobs/{job_id}", {"priority": "P1", "reason": "same"}, "json")
    assert response.status_code == 200 and not changes(job_id)
