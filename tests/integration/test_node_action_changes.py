"""A node action's `changed` is what it did (QA: four cordons at once each answered `changed`
and wrote an event; a cordon again with a new reason answered `changed: false`, yet changed the
reason and recorded it), and a cordon or drain again for the same reason records nothing."""

import threading

import pytest
from django.db import connection

from scheduling.models import Node
from teams.models import AuditEvent

NAME = "z2-r3-l40s-02"


def act(api, action: str, reason: str, node: str = NAME) -> dict:
    response = api("ops").post(f"/api/v1/nodes/{node}/{action}", {"reason": reason}, format="json")
    assert response.status_code == 200, response.json()
    return response.json()


def events(node: str = NAME) -> list[tuple[str, str]]:
    rows = AuditEvent.objects.filter(node__name=node, kind="NODE_STATE").order_by("id")
    return list(rows.values_list("reason", "message"))


def test_again_for_the_same_reason_changes_and_records_nothing(demo, api):
    assert act(api, "cordon", "s1")["changed"] is True
    assert act(api, "cordon", "s1")["changed"] is False
    again = act(api, "cordon", "s2")
    assert (again["changed"], again["admin_reason"]) == (True, "s2")
    assert events() == [("CORDONED", "cordoned: s1"), ("CORDONED", "cordoned: s2")]

    assert act(api, "drain", "DIMM")["changed"] is True
    assert act(api, "drain", "DIMM")["changed"] is False
    assert act(api, "uncordon", "fixed")["changed"] is True
    assert act(api, "uncordon", "fixed")["changed"] is False
    assert [reason for reason, _ in events()] == ["CORDONED", "CORDONED", "DRAINING", "UNCORDONED"]


def test_a_bulk_cordon_again_leaves_the_nodes_cordoned_for_that_reason_unchanged(demo, api):
    act(api, "cordon", "PDU", node="z1-r1-h100-01")
    body = {"names": ["z1-r1-h100-01", "z1-r1-h100-02"], "action": "cordon", "reason": "PDU"}
    response = api("ops").post("/api/v1/nodes/bulk", body, format="json").json()
    assert ([node["name"] for node in response["nodes"]], response["unchanged"]) == (
        ["z1-r1-h100-02"],
        ["z1-r1-h100-01"],
    )
    assert AuditEvent.objects.filter(node__name="z1-r1-h100-01", reason="CORDONED").count() == 1


@pytest.mark.django_db(transaction=True)
def test_four_cordons_at_once_change_the_node_once(demo, api):
    client = api("ops")
    answers, errors = [], []
    barrier = threading.Barrier(4)

    def cordon():
        try:
            barrier.wait()
            response = client.post(f"/api/v1/nodes/{NAME}/cordon", {"reason": "at once"}, format="json")
            answers.append((response.status_code, response.json()["changed"]))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=cordon) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert sorted(answers) == [(200, False), (200, False), (200, False), (200, True)]
    assert events() == [("CORDONED", "cordoned: at once")]
    assert Node.objects.get(name=NAME).admin_reason == "at once"
