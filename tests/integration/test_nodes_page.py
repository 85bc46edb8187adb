"""The admin console at /nodes/: site admins only; the heatmap by rack (a square per node) and
the node list, a node's GPUs (used, reserved, draining, down) on its own page, cordon / drain /
uncordon with a required reason, fragmentation, the scheduler's status, recent preemptions and
failures, in a bounded number of queries. Filters and bulk actions: test_nodes_console.py."""

import itertools
import re
from datetime import timedelta

import pytest
from django.db.models import DateTimeField, ExpressionWrapper
from django.db.models.functions import Now
from django.utils import timezone

from scheduling import lifecycle
from scheduling.leader.worker import run_pass
from scheduling.models import Job, Node, SchedulerLease, Task
from scheduling.stopping import do_request_stop
from teams.models import AuditEvent
from tests.conftest import make_spec
from tests.nodes import cordon, drain, fall_silent, heartbeat

HTMX = {"HTTP_HX_REQUEST": "true"}
H100 = "z1-r1-h100-01"
CLIENT_IDS = itertools.count()


@pytest.fixture
def ops(demo, client):
    client.login(username="ops", password="demo")
    return client


@pytest.fixture
def ready(demo):
    """A leader at epoch 1, and every node READY (its agent heartbeated)."""
    SchedulerLease.objects.filter(pk=1).update(epoch=1)
    heartbeat()


def submit(api, **resources) -> int:
    spec = make_spec(client_job_id=f"console-{next(CLIENT_IDS)}", resources={"gpu_count": 8, **resources})
    return api("alice").post("/api/v1/jobs", spec, format="json").json()["id"]


def place(api, **resources) -> tuple[int, str]:
    """Submit a GPU job as alice and run a pass; returns the job and the node it landed on."""
    job_id = submit(api, **resources)
    run_pass(epoch=1)
    return job_id, Task.objects.get(job_id=job_id).node.name


def node_line(html: str, name: str) -> str:
    """The node's square in the heatmap and its line in the node list."""
    square = re.search(rf'<a class="cell [^"]*" id="node-{re.escape(name)}".*?</a>', html, re.DOTALL)
    line = re.search(rf'<tr class="node-line" id="line-{re.escape(name)}".*?</tr>', html, re.DOTALL)
    assert square and line, f"no square or line for {name}"
    return square.group(0) + line.group(0)


def cells(html: str, status: str) -> int:
    """GPU squares of a status, not counting the legend's (which have no tooltip)."""
    return html.count(f'class="gpu {status}" title=')


def node_page(client, name: str) -> str:
    return client.get(f"/nodes/{name}/").content.decode()


def gpu_cells(client, names) -> str:
    return "".join(node_page(client, name).split('id="gpu-cells"')[1].split("</dd>")[0] for name in names)


def post(client, node: str, action: str, reason: str, **headers):
    return client.post("/nodes/", {"node": node, "action": action, "reason": reason}, **headers)


def test_only_site_admins(demo, client):
    assert client.get("/nodes/").status_code == 302  # to the login page
    client.login(username="alice", password="demo")
    refused = client.get("/nodes/")
    assert refused.status_code == 403
    assert "Only site admins may see the nodes." in refused.content.decode()  # not a bare "403 Forbidden" (QA)
    assert client.get("/nodes/?part=heatmap", **HTMX).status_code == 403
    assert post(client, H100, "drain", "maintenance", **HTMX).status_code == 403
    assert Node.objects.get(name=H100).state == "NEW"
    assert not AuditEvent.objects.filter(kind="NODE_STATE", node__name=H100).exists()


def test_the_django_admin_shows_nodes_but_changes_none(ops, ready):
    """QA: its form set a node DRAINING with no audit entry and no task stopped."""
    node = Node.objects.get(name=H100)
    assert ops.get(f"/admin/scheduling/node/{node.pk}/change/").status_code == 200  # to look at
    changed = ops.post(f"/admin/scheduling/node/{node.pk}/change/", {"state": "DRAINING", "name": H100})
    assert changed.status_code == 403
    assert Node.objects.get(name=H100).state == node.state


def test_every_node_by_rack_with_its_state(ops, ready):
    fall_silent("z2-r2-a100-03", health="LOST", epoch=1)
    html = ops.get("/nodes/").content.decode()
    racks = re.findall(r'<div class="rack" id="rack-([^"]+)">(.*?)</div>\s*</div>', html, re.DOTALL)
    assert [rack for rack, _ in racks] == [f"z{z}-r{r}" for z in (1, 2) for r in (1, 2, 3, 4)]
    names = {rack: re.findall(r'id="node-([^"]+)"', body) for rack, body in racks}
    assert sum(len(n) for n in names.values()) == 36 and len(names["z1-r1"]) == 8
    assert all(name.startswith(rack) for rack, ns in names.items() for name in ns)
    lost = node_line(html, "z2-r2-a100-03")
    reason = Node.objects.get(name="z2-r2-a100-03").state_reason
    assert 'data-state="LOST"' in lost and "n-LOST" in lost
    assert reason.startswith("no heartbeat for ") and reason in lost
    assert ">0</a>" in lost and "0/8 A100 GPUs free" in lost
    assert cells(gpu_cells(ops, ["z2-r2-a100-03"]), "down") == 8
    assert "96/96 CPUs free" in node_line(html, "z1-r4-cpu-01")
    assert 'data-state="READY" data-count="35"' in html and 'data-state="LOST" data-count="1"' in html


def test_gpu_cells_show_a_placed_job(api, ops, ready):
    job_id, node = place(api)
    html = ops.get("/nodes/").content.decode()
    assert 'class="cell n-READY none"' in node_line(html, node) and "0/8 H100 GPUs free" in node_line(html, node)
    assert html.count("n-READY none") == 2  # the node's square and the legend's
    page = node_page(ops, node)
    assert cells(page, "used") == 8 and f"used by job {job_id}" in page
    assert f'href="/jobs/{job_id}/"' in page.split('id="tasks"')[1]


def test_reserved_draining_and_down_cells(api, ops, ready):
    job_id = submit(api, gpu_count=64)
    Job.objects.filter(pk=job_id).update(reserved_nodes=["z1-r1-h100-02", "z1-r1-h100-03"])
    drain("z1-r2-a100-01")
    cordon("z1-r3-l40s-01")
    fall_silent("z1-r3-l40s-01", health="SUSPECT", epoch=1)
    html = ops.get("/nodes/").content.decode()
    gpu_nodes = Node.objects.exclude(gpu_type="").values_list("name", flat=True)
    every_gpu = gpu_cells(ops, gpu_nodes)
    assert cells(every_gpu, "reserved") == 16
    assert f"reserved for job {job_id}" in node_page(ops, "z1-r1-h100-02")
    assert cells(gpu_cells(ops, ["z1-r2-a100-01"]), "draining") == 8
    assert 'data-state="DRAINING"' in node_line(html, "z1-r2-a100-01")
    suspect = node_line(html, "z1-r3-l40s-01")
    assert cells(gpu_cells(ops, ["z1-r3-l40s-01"]), "down") == 8
    assert "cordoned by an admin" in suspect and 'value="uncordon"' in node_page(ops, "z1-r3-l40s-01")
    assert cells(every_gpu, "free") == 28 * 8 - 16 - 8 - 8  # 28 GPU nodes


def test_drain_then_uncordon(api, ops, ready, user):
    job_id, node = place(api)
    response = post(ops, node, "drain", "replace a DIMM", **HTMX)
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="heatmap"')
    assert 'data-state="DRAINING"' in node_line(html, node) and f"{node} is now DRAINING" in html
    event = AuditEvent.objects.filter(kind="NODE_STATE", node__name=node).latest("id")
    assert (event.reason, event.actor, event.actor_name) == ("DRAINING", user("ops"), "ops")
    assert "replace a DIMM" in event.message
    assert Task.objects.get(job_id=job_id).stop_reason == "DRAIN"

    html = post(ops, node, "uncordon", "DIMM replaced", **HTMX).content.decode()
    assert 'data-state="READY"' in node_line(html, node)
    assert AuditEvent.objects.filter(kind="NODE_STATE", node__name=node).latest("id").reason == "UNCORDONED"
    # Uncordoning a node that is neither cordoned nor draining changes nothing, and says so once.
    post(ops, node, "uncordon", "again", **HTMX)
    assert AuditEvent.objects.filter(kind="NODE_STATE", node__name=node, reason="UNCORDONED").count() == 1


def test_cordon_and_drain_wait(ops, ready):
    post(ops, H100, "cordon", "flaky NIC", **HTMX)
    assert Node.objects.get(name=H100).state == "CORDONED"
    html = post(ops, H100, "drain_wait", "let it finish", **HTMX).content.decode()
    assert 'data-state="DRAINING"' in node_line(html, H100)
    assert AuditEvent.objects.filter(kind="NODE_STATE", node__name=H100).latest("id").data["wait"] is True


def test_an_action_needs_a_reason(ops, ready):
    before = AuditEvent.objects.filter(kind="NODE_STATE").count()
    response = post(ops, H100, "drain", "  ", **HTMX)
    assert response.status_code == 200  # htmx swaps no 4xx
    html = response.content.decode()
    assert 'data-state="READY"' in node_line(html, H100)
    assert re.search(rf'id="action-error" role="alert">{H100}: reason: ', html)
    refused = post(ops, H100, "reboot", "why not", **HTMX)
    assert refused.status_code == 200 and refused.content.decode().count('class="error"') == 1
    assert "action: unknown action &#x27;reboot&#x27;" in refused.content.decode()
    assert Node.objects.get(name=H100).state == "READY"
    assert AuditEvent.objects.filter(kind="NODE_STATE").count() == before


@pytest.mark.parametrize("headers", [HTMX, {}])
def test_an_action_on_an_unknown_node_is_refused_on_the_console_naming_the_field(ops, ready, headers):
    """It was Django's bare 404 page, with or without htmx, where every other refusal is said on
    the console."""
    for extra in ({}, {"from": "node"}):
        body = {"node": "nope", "action": "cordon", "reason": "x", **extra}
        response = ops.post("/nodes/", body, **headers)
        assert response.status_code == (200 if headers else 400)  # htmx swaps no 4xx
        assert 'id="action-error" role="alert">node: no such node: nope.</span>' in response.content.decode()
    assert not AuditEvent.objects.filter(kind="NODE_STATE", actor_name="ops").exists()


def test_without_htmx_a_post_redirects_or_shows_the_page(ops, ready):
    response = post(ops, H100, "cordon", "firmware update")
    assert response.status_code == 302 and response["Location"] == "/nodes/"
    assert f"{H100} is now CORDONED" in ops.get("/nodes/").content.decode()
    page = post(ops, H100, "uncordon", "")
    assert page.status_code == 400 and "<html" in page.content.decode() and 'class="error"' in page.content.decode()
    assert Node.objects.get(name=H100).state == "CORDONED"


def test_the_heatmap_refreshes_itself(ops, ready):
    html = ops.get("/nodes/?part=heatmap", **HTMX).content.decode()
    assert html.lstrip().startswith('<div id="heatmap"') and "<html" not in html
    assert 'hx-get="/nodes/?part=heatmap"' in html and 'hx-trigger="every 5s' in html
    filtered = ops.get("/nodes/?part=heatmap&rack=z1-r1&state=READY", **HTMX).content.decode()
    assert 'hx-get="/nodes/?part=heatmap&amp;rack=z1-r1&amp;state=READY"' in filtered  # it keeps its filters
    fall_silent(H100, health="LOST", epoch=1)
    assert 'data-state="LOST"' in node_line(ops.get("/nodes/?part=heatmap", **HTMX).content.decode(), H100)
    assert "<html" in ops.get("/nodes/").content.decode()


def test_recent_preemptions_and_failures(api, ops, ready):
    victim, _ = place(api)
    other, _ = place(api, gpu_type="A100")
    do_request_stop(job_id=victim, reason="PREEMPTED", grace_s=5, message="preempted for job 99")
    do_request_stop(job_id=other, reason="DRAIN", grace_s=5, message="node draining")
    task = Task.objects.get(job_id=other)
    assert lifecycle.transition_task(task, to_state="FAILED", reason="EXIT_NONZERO", message="exit 1")
    html = ops.get("/nodes/").content.decode()
    preemptions = html.split('id="preemptions"')[1].split("</table>")[0]
    failures = html.split('id="failures"')[1].split("</table>")[0]
    assert f'href="/jobs/{victim}/"' in preemptions and "preempted for job 99" in preemptions
    assert f'href="/jobs/{other}/"' not in preemptions
    assert f'href="/jobs/{other}/"' in failures and "EXIT_NONZERO" in failures
    assert f'href="/jobs/{victim}/"' not in failures


def test_gpus_and_fragmentation_per_class(api, ops, ready):
    place(api, gpu_count=4, gpus_per_task=4)
    cordon("z1-r2-a100-01")
    html = ops.get("/nodes/").content.decode()
    h100 = re.search(r'<tr id="gpus-H100">(.*?)</tr>', html, re.DOTALL).group(1)
    assert re.findall(r"<td[^>]*>([^<]*)</td>", h100) == ["gpu:H100", "4", "124", "0", "3.2%"]
    a100 = re.search(r'<tr id="gpus-A100">(.*?)</tr>', html, re.DOTALL).group(1)
    assert re.findall(r"<td[^>]*>([^<]*)</td>", a100) == ["gpu:A100", "0", "56", "8", "0.0%"]


def renewed_ago(seconds: float):
    """The database's now() less `seconds`: whether a lease is alive is judged by the database's
    clock (scheduling.selectors.scheduler_state), so it is moved there, not in Python."""
    return ExpressionWrapper(Now() - timedelta(seconds=seconds), output_field=DateTimeField())


def test_scheduler_status(ops):
    SchedulerLease.objects.filter(pk=1).update(
        epoch=7,
        holder="sched-1:42",
        renewed_at=renewed_ago(0),
        lease_seconds=10,
        last_pass_ms=12.5,
        last_pass_at=timezone.now(),
    )
    html = ops.get("/nodes/").content.decode()
    assert "sched-1:42" in html and '<dd id="epoch">7</dd>' in html and "12.5 ms" in html
    assert '<dd id="last-forecast">none yet</dd>' in html
    SchedulerLease.objects.filter(pk=1).update(forecast_at=renewed_ago(600), forecast_ms=4000.0)
    html = ops.get("/nodes/").content.decode()
    # 600 s, and the moments a loaded machine takes to get here; stale past 5 x 5 s + 2 x 4 s
    assert re.search(r"4000 ms, its snapshot 60\d s old", html) and "stale: not refreshed within 33 s" in html
    SchedulerLease.objects.filter(pk=1).update(renewed_at=renewed_ago(30))  # and no renewal since
    html = ops.get("/nodes/").content.decode()
    assert "sched-1:42" not in html and "the lease has lapsed" in html


def test_a_bounded_number_of_queries(api, ops, ready, django_assert_max_num_queries):
    for _ in range(3):
        place(api)
    Job.objects.filter(pk=submit(api, gpu_count=64)).update(reserved_nodes=["z2-r1-h100-01"])
    with django_assert_max_num_queries(15):
        assert ops.get("/nodes/").status_code == 200
    with django_assert_max_num_queries(8):
        assert ops.get("/nodes/?part=heatmap", **HTMX).status_code == 200


def test_a_node_whose_agent_cannot_isolate_tasks_is_marked_and_warned_about(ops):
    Node.objects.filter(name=H100).update(task_isolation="none")
    Node.objects.filter(name="z1-r1-h100-02").update(task_isolation="uid")
    page = ops.get("/nodes/").content.decode()
    warning = re.search(r'<div class="flash error" id="unisolated".*?</div>', page, re.DOTALL).group(0)
    assert "No task isolation on 1 node" in warning and H100 in warning and "z1-r1-h100-02" not in warning
    line = node_line(page, H100)
    assert "no isolation" in line and "unisolated" in line
    other = node_line(page, "z1-r1-h100-02")
    assert "no isolation" not in other and "unisolated" not in other


def test_an_admin_resets_a_nodes_token_from_the_console(ops):
    heartbeat(H100)
    Node.objects.filter(name=H100).update(token_digest="x" * 64)
    response = ops.post("/nodes/", {"node": H100, "action": "reset_token", "reason": "reinstalled"}, **HTMX)
    assert response.status_code == 200 and "token is reset" in response.content.decode()
    node = Node.objects.get(name=H100)
    assert (node.token_digest, node.health) == ("", "SUSPECT")
    assert AuditEvent.objects.get(kind="SECURITY", reason="NODE_TOKEN_RESET").actor_name == "ops"
