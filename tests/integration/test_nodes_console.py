"""The nodes console's filters (GET parameters, applied in the database), its counts per state,
and bulk cordon, drain and uncordon from the console and from POST /api/v1/nodes/bulk: one
reason, one audit entry per node, all or nothing, site admins only, bad input named."""

import re

import pytest

from scheduling.leader.worker import run_pass
from scheduling.models import Node, SchedulerLease, Task
from teams.models import AuditEvent
from tests.conftest import make_spec
from tests.nodes import cordon, drain, fall_silent, heartbeat

HTMX = {"HTTP_HX_REQUEST": "true"}
Z1_R1 = [f"z1-r1-h100-0{i}" for i in range(1, 9)]


@pytest.fixture
def ops(demo, client):
    client.login(username="ops", password="demo")
    return client


@pytest.fixture
def ready(demo):
    SchedulerLease.objects.filter(pk=1).update(epoch=1)
    heartbeat()


def squares(html: str) -> list[str]:
    return re.findall(r'<a class="cell [^"]*" id="node-([^"]+)"', html)


def counts(html: str) -> dict[str, int]:
    return {state: int(n) for state, n in re.findall(r'data-state="(\w+)" data-count="(\d+)"', html)}


def node_events(names, reason: str) -> list[tuple[str, str, str]]:
    rows = AuditEvent.objects.filter(kind="NODE_STATE", reason=reason, node__name__in=names)
    return sorted(rows.values_list("node__name", "actor_name", "message"))


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("rack=z1-r1", Z1_R1),
        ("zone=z2&gpu_type=A100", [f"z2-r2-a100-0{i}" for i in range(1, 5)]),
        ("zone=z2&gpu_type=a100", [f"z2-r2-a100-0{i}" for i in range(1, 5)]),  # as gpu_type=CPU matches cpu
        ("gpu_type=cpu&zone=z1", [f"z1-r4-cpu-0{i}" for i in range(1, 5)]),
        ("label=ib=hdr200", [f"z{z}-r2-a100-0{i}" for z in (1, 2) for i in range(1, 5)]),
        ("label=ib&zone=z1", [*Z1_R1, *[f"z1-r2-a100-0{i}" for i in range(1, 5)]]),
        ("name=L40S", [f"z{z}-r3-l40s-0{i}" for z in (1, 2) for i in range(1, 3)]),
        ("state=CORDONED&state=LOST", ["z1-r3-l40s-01", "z2-r1-h100-03"]),
        ("name=nothing-like-this", []),
    ],
)
def test_filters_are_get_parameters(ops, ready, query, expected):
    cordon("z1-r3-l40s-01")
    fall_silent("z2-r1-h100-03", health="LOST", epoch=1)
    html = ops.get(f"/nodes/?{query}").content.decode()
    assert squares(html) == expected
    assert f'id="matching" data-count="{len(expected)}"' in html
    fragment = ops.get(f"/nodes/?part=heatmap&{query}", **HTMX).content.decode()
    assert squares(fragment) == expected
    if not expected:
        assert 'id="no-nodes"' in html


def test_counts_per_state_follow_the_filters(ops, ready):
    drain(["z1-r2-a100-01", "z1-r2-a100-02"])
    fall_silent("z1-r2-a100-03", health="SUSPECT", epoch=1)
    every = counts(ops.get("/nodes/").content.decode())
    assert every == {"NEW": 0, "READY": 33, "CORDONED": 0, "DRAINING": 2, "SUSPECT": 1, "LOST": 0}
    rack = counts(ops.get("/nodes/?rack=z1-r2").content.decode())
    assert rack == {"NEW": 0, "READY": 1, "CORDONED": 0, "DRAINING": 2, "SUSPECT": 1, "LOST": 0}


def test_squares_show_free_gpus_and_link_to_the_node(api, ops, ready):
    spec = make_spec(client_job_id="half", resources={"gpu_count": 4, "gpus_per_task": 4})
    job_id = api("alice").post("/api/v1/jobs", spec, format="json").json()["id"]
    run_pass(epoch=1)
    node = Task.objects.get(job_id=job_id).node.name
    html = ops.get("/nodes/").content.decode()
    square = re.search(rf'<a class="cell ([^"]*)" id="node-{node}"[^>]*>(\d+)</a>', html)
    assert square.group(1).split() == ["n-READY", "some"] and square.group(2) == "4"
    assert f'href="/nodes/{node}/"' in html
    page = ops.get(f"/nodes/{node}/").content.decode()
    assert "ib=ndr400" in page and f'href="/jobs/{job_id}/"' in page and "8 × H100" in page


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("state=ASLEEP", "state"),
        ("label==x", "label"),
        ("name=" + "x" * 300, "name"),
        # A typo showed the whole fleet; a second zone replaced the first.
        ("stat=LOST", "stat"),
        ("zone=z1&zone=z2", "zone"),
    ],
)
def test_a_bad_filter_is_a_400_naming_it(ops, ready, query, field):
    response = ops.get(f"/nodes/?{query}")
    assert response.status_code == 400
    errors = re.search(r'id="filter-errors" role="alert">(.*?)</div>', response.content.decode(), re.DOTALL)
    assert errors.group(1).strip().startswith(f"{field}: ")
    fragment = ops.get(f"/nodes/?part=heatmap&{query}", **HTMX)  # a 200: htmx swaps no 4xx
    assert fragment.status_code == 200 and 'id="filter-errors"' in fragment.content.decode()


def test_the_console_drains_a_rack_and_picked_nodes_with_one_audit_entry_each(ops, ready):
    response = ops.post(
        "/nodes/",
        {"action": "drain", "reason": "PDU swap", "racks": ["z1-r1"], "nodes": ["z2-r3-l40s-01"]},
        **HTMX,
    )
    assert response.status_code == 200
    html = response.content.decode()
    names = [*Z1_R1, "z2-r3-l40s-01"]
    assert "9 nodes drained" in html
    assert set(Node.objects.filter(state="DRAINING").values_list("name", flat=True)) == set(names)
    assert node_events(names, "DRAINING") == [(name, "ops", "draining: PDU swap") for name in sorted(names)]
    ops.post("/nodes/", {"action": "uncordon", "reason": "PDU swapped", "racks": ["z1-r1"]}, **HTMX)
    assert Node.objects.filter(name__in=Z1_R1, state="READY").count() == 8
    assert len(node_events(Z1_R1, "UNCORDONED")) == 8


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"action": "drain", "reason": "", "racks": ["z1-r1"]}, "reason"),
        # The form's own field names (QA: "names: select nodes (names) or a rack." on a form of checkboxes).
        ({"action": "drain", "reason": "x"}, "nodes: tick the nodes or racks to act on first."),
        ({"action": "reboot", "reason": "x", "racks": ["z1-r1"]}, "action"),
        ({"action": "drain", "reason": "x", "racks": ["z9-r9"]}, "racks"),
        ({"action": "drain", "reason": "x", "nodes": ["z1-r1-h100-01", "nope"]}, "nodes"),
    ],
)
def test_a_bad_bulk_action_changes_nothing_and_names_the_field(ops, ready, body, field):
    response = ops.post("/nodes/", body, **HTMX)
    assert response.status_code == 200  # htmx swaps no 4xx: #action-error must reach the page
    assert f'id="action-error" role="alert">{field}' in response.content.decode()
    assert ops.post("/nodes/", body).status_code == 400  # a plain form post: the page, as a 400
    assert not Node.objects.exclude(state="READY").exists()
    assert not AuditEvent.objects.filter(kind="NODE_STATE", actor_name="ops").exists()


def test_the_bulk_api(api, ready):
    response = api("ops").post(
        "/api/v1/nodes/bulk", {"action": "cordon", "rack": "z1-r1", "reason": "firmware"}, format="json"
    )
    assert response.status_code == 200
    body = response.json()
    assert (body["action"], body["count"]) == ("cordon", 8)
    assert [(n["name"], n["state"], n["admin_reason"]) for n in body["nodes"]] == [
        (name, "CORDONED", "firmware") for name in Z1_R1
    ]
    assert len(node_events(Z1_R1, "CORDONED")) == 8
    names = ["z1-r1-h100-01", "z2-r4-cpu-01"]
    response = api("ops").post(
        "/api/v1/nodes/bulk", {"action": "drain", "names": names, "reason": "rebalance"}, format="json"
    )
    assert [n["state"] for n in response.json()["nodes"]] == ["DRAINING", "DRAINING"]
    # An uncordon counts and audits only the nodes it changed (it counted a node already in service).
    names = ["z1-r1-h100-01", "z2-r3-l40s-01"]
    response = api("ops").post(
        "/api/v1/nodes/bulk", {"action": "uncordon", "names": names, "reason": "done"}, format="json"
    )
    body = response.json()
    assert (body["count"], [n["name"] for n in body["nodes"]], body["unchanged"]) == (1, [names[0]], [names[1]])
    assert node_events(names, "UNCORDONED") == [(names[0], "ops", "uncordoned: done")]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"action": "drain", "rack": "z1-r1"}, "reason"),
        ({"action": "drain", "rack": "z1-r1", "reason": " "}, "reason"),
        ({"action": "reset_token", "rack": "z1-r1", "reason": "x"}, "action"),
        ({"action": "drain", "reason": "x"}, "names"),
        ({"action": "drain", "reason": "x", "names": "z1-r1-h100-01"}, "names"),
        ({"action": "drain", "reason": "x", "names": ["z1-r1-h100-01", "ghost"]}, "names"),
        ({"action": "drain", "reason": "x", "rack": "z7-r1"}, "rack"),
        # Strict: a drain that meant to wait is not a forced one, a number is not a reason, and
        # a zero-width space or an escape sequence is not one either.
        ({"action": "drain", "rack": "z1-r1", "reason": "x", "wait": True}, "wait"),
        ({"action": "drain", "rack": "z1-r1", "reason": 5}, "reason"),
        ({"action": "cordon", "rack": "z1-r1", "reason": "\u200b"}, "reason"),
        ({"action": "cordon", "rack": "z1-r1", "reason": "\x1b[2J"}, "reason"),
        ({"action": "cordon", "rack": 7, "reason": "x"}, "rack"),
    ],
)
def test_the_bulk_api_refuses_bad_input_naming_the_field(api, ready, body, field):
    response = api("ops").post("/api/v1/nodes/bulk", body, format="json")
    assert response.status_code == 400 and list(response.json()["fields"]) == [field]
    assert not Node.objects.exclude(state="READY").exists()
    assert not AuditEvent.objects.filter(kind="NODE_STATE", actor_name="ops").exists()


def test_only_site_admins_act_in_bulk_or_see_a_node(api, client, ready):
    body = {"action": "drain", "rack": "z1-r1", "reason": "x"}
    assert api("rita").post("/api/v1/nodes/bulk", body, format="json").status_code == 403
    assert api(None).post("/api/v1/nodes/bulk", body, format="json").status_code in (401, 403)
    client.login(username="alice", password="demo")
    assert client.post("/nodes/", {**body, "racks": ["z1-r1"]}).status_code == 403
    assert client.get("/nodes/z1-r1-h100-01/").status_code == 403
    assert not Node.objects.exclude(state="READY").exists()


def test_a_node_page_shows_its_history_and_acts_on_it(ops, ready):
    name = "z1-r2-a100-01"
    response = ops.post("/nodes/", {"node": name, "action": "cordon", "reason": "ECC errors", "from": "node"})
    assert response.status_code == 302 and response["Location"] == f"/nodes/{name}/"
    page = ops.get(f"/nodes/{name}/").content.decode()
    assert 'data-state="CORDONED"' in page and "cordoned: ECC errors" in page
    history = page.split('id="history"')[1]
    assert history.index("cordoned: ECC errors") < history.index("NEW -&gt; READY: heartbeat received")
    assert ops.get("/nodes/no-such-node/").status_code == 404


def test_the_console_reads_a_bounded_number_of_queries_whatever_the_filters(ops, ready, django_assert_max_num_queries):
    with django_assert_max_num_queries(15):
        assert ops.get("/nodes/?zone=z1&state=READY&label=ib&name=h100").status_code == 200


def test_the_nodes_api_filters_as_the_console_does(api):
    def names(query: str) -> list[str]:
        response = api("ops").get(f"/api/v1/nodes?{query}")
        assert response.status_code == 200, response.json()
        return [node["name"] for node in response.json()["results"]]

    cpu = names("gpu_type=cpu")
    assert cpu and cpu == names("gpu_type=CPU") and all("-cpu-" in name for name in cpu)
    assert names("rack=z1-r1") == Z1_R1
    assert names("name=h100-0&rack=z1-r1") == Z1_R1
    assert names("gpu_type=H100&label=ib=ndr400") == sorted(names("gpu_type=H100"))


@pytest.mark.parametrize(
    ("action", "body", "field"),
    [
        ("drain", {"reason": "w", "wiat": True}, "wiat"),
        ("drain", {"reason": "w", "wait": 1}, "wait"),
        ("drain", {"reason": "w", "wait": "yes"}, "wait"),
        ("cordon", {"reason": 123}, "reason"),
        ("cordon", {"reason": "\u202eevil"}, "reason"),
        ("include-gpus", {"reason": "reseated", "gpus": ["3"]}, "gpus.0"),
    ],
)
def test_a_node_action_refuses_bad_input_naming_the_field(api, ready, action, body, field):
    response = api("ops").post(f"/api/v1/nodes/z1-r1-h100-01/{action}", body, format="json")
    assert response.status_code == 400 and list(response.json()["fields"]) == [field], response.json()
    assert not Node.objects.exclude(state="READY").exists()
    assert not AuditEvent.objects.filter(kind="NODE_STATE", actor_name="ops").exists()
