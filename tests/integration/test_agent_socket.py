"""Heartbeats over the agent's WebSocket: the HTTP heartbeat's reply and refusals, the node
token checked at the handshake and again at each heartbeat, and a batch of heartbeats costing
one SQL statement."""

import asyncio
import json

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client import REGISTRY
from rest_framework import exceptions

from agents.consumers import BAD_ID, HELLO, TOKEN_REVOKED, UNKNOWN_TYPE
from agents.heartbeats import Beat, handle_many, refused
from agents.management.commands.seed_demo import ADMIN
from agents.protocol import HeartbeatSerializer, heartbeat_tasks
from agents.services import do_register_node, do_reset_node_token
from mlqueue.asgi import application
from scheduling.leader.worker import run_pass
from scheduling.models import Node, SchedulerLease, Task
from scheduling.notify import wake_agents
from teams.models import hash_token
from tests.conftest import make_spec
from tests.nodes import cordon, heartbeat

INVENTORY = {"zone": "z1", "rack": "z1-r1", "gpu_type": "H100", "gpu_count": 8, "cpu_count": 64, "memory_gb": 256}
EPOCH = 4


@pytest.fixture
def node(transactional_db, fresh_liveness, demo):
    """A new node, READY, alone in the fleet (the demo's nodes cordoned), at lease epoch EPOCH."""
    cache.clear()
    # A transactional test flushes the lease row its migration made: make it again.
    SchedulerLease.objects.update_or_create(
        pk=1, defaults={"epoch": EPOCH, "holder": "test:1", "renewed_at": timezone.now()}
    )
    _, token = do_register_node(name="z1-r1-h100-99", inventory=INVENTORY)
    heartbeat("z1-r1-h100-99")
    cordon(Node.objects.exclude(name="z1-r1-h100-99"))
    return "z1-r1-h100-99", token


def agent_socket(name: str, token: str) -> WebsocketCommunicator:
    return WebsocketCommunicator(
        application, f"/ws/agents/{name}/", headers=[(b"authorization", f"Bearer {token}".encode())]
    )


def over_socket(name: str, token: str, *messages) -> list[dict]:
    """Open the node's socket, send each message (a dict, or text as is) and collect the replies."""

    async def scenario():
        socket = agent_socket(name, token)
        connected, _ = await socket.connect()
        assert connected
        assert await socket.receive_json_from(timeout=10) == HELLO
        replies = []
        for message in messages:
            await socket.send_to(text_data=message if isinstance(message, str) else json.dumps(message))
            replies.append(await socket.receive_json_from(timeout=10))
        await socket.disconnect()
        return replies

    return async_to_sync(scenario)()


def over_http(client, name: str, token: str, body: dict):
    return client.post(
        f"/api/v1/agents/{name}/heartbeat", body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )


def test_a_socket_heartbeat_gets_the_reply_an_http_heartbeat_gets(node, api, client):
    name, token = node
    job_id = api("alice").post("/api/v1/jobs", make_spec(resources={"gpu_count": 8}), format="json").json()["id"]
    run_pass(epoch=EPOCH)

    [socket] = over_socket(name, token, {"type": "heartbeat", "id": 1, "body": {"tasks": []}})
    http = over_http(client, name, token, {"tasks": []}).json()
    assert (socket["id"], socket["status"]) == (1, 200)
    assert {**socket["body"], "lease_until": None} == {**http, "lease_until": None}
    [assignment] = socket["body"]["assignments"]
    assert (assignment["job_id"], assignment["attempt"], assignment["epoch"]) == (job_id, 1, EPOCH)
    assert socket["body"]["highest_epoch"] == EPOCH

    # The agent reports it running, over the socket: the same write as over HTTP.
    running = {"job_id": job_id, "rank": 0, "attempt": 1, "state": "running"}
    [reply] = over_socket(name, token, {"type": "heartbeat", "id": 2, "body": {"tasks": [running]}})
    assert reply["body"]["assignments"] == [] and Task.objects.get(job_id=job_id).state == "RUNNING"


def test_an_attempt_no_longer_assigned_is_killed_over_the_socket_as_over_http(node, client):
    name, token = node
    stale = {"job_id": 999, "rank": 0, "attempt": 3, "state": "running"}
    [reply] = over_socket(name, token, {"type": "heartbeat", "id": 7, "body": {"tasks": [stale]}})
    assert reply["body"]["kill"] == [{"job_id": 999, "rank": 0, "attempt": 3}]
    assert over_http(client, name, token, {"tasks": [stale]}).json()["kill"] == reply["body"]["kill"]


def test_the_socket_refuses_a_bad_heartbeat_as_http_does(node, client):
    name, token = node
    bad = {"tasks": [{"job_id": "x", "rank": 0, "attempt": 1, "state": "running"}]}
    replies = over_socket(
        name,
        token,
        {"type": "heartbeat", "id": 1, "body": bad},
        {"type": "heartbeat", "id": 2, "body": {"highest_epoch": True}},
        {"type": "bogus", "id": 3},
        {"type": "heartbeat", "id": "three"},
        "{not json",
        {"type": "heartbeat", "id": 4, "body": {}},  # the socket stays open after refusals
    )
    http = over_http(client, name, token, bad)
    assert (replies[0]["status"], replies[0]["body"]) == (400, http.json())
    assert replies[1]["status"] == 400 and list(replies[1]["body"]["fields"]) == ["highest_epoch"]
    assert replies[2] == {"id": 3, "status": 400, "body": refused_body("type", UNKNOWN_TYPE.format(kind="bogus"))}
    assert replies[3] == {"id": None, "status": 400, "body": refused_body("id", BAD_ID)}
    assert (replies[4]["status"], list(replies[4]["body"]["fields"])) == (400, ["body"])
    assert (replies[5]["id"], replies[5]["status"]) == (4, 200)


def refused_body(field: str, message: str) -> dict:
    return {"detail": f"{field}: {message}", "fields": {field: [message]}}


def test_a_socket_opens_only_with_its_own_nodes_token(node):
    name, token = node
    _, other = do_register_node(name="z1-r1-h100-98", inventory=INVENTORY)

    async def scenario():
        for header in ([], [(b"authorization", b"Bearer wrong")], [(b"authorization", f"Bearer {other}".encode())]):
            socket = WebsocketCommunicator(application, f"/ws/agents/{name}/", headers=header)
            assert await socket.connect() == (False, 4003)
            await socket.disconnect()

    async_to_sync(scenario)()


def test_a_heartbeat_after_the_nodes_token_was_reset_is_refused_and_the_socket_closes(node, client):
    name, token = node
    admin = get_user_model().objects.get(username=ADMIN)
    reset = sync_to_async(lambda: do_reset_node_token(node=Node.objects.get(name=name), user=admin, reason="leaked"))

    async def scenario():
        socket = agent_socket(name, token)
        assert (await socket.connect())[0]
        assert await socket.receive_json_from(timeout=10) == HELLO
        await reset()
        await socket.send_json_to({"type": "heartbeat", "id": 1, "body": {}})
        reply = await socket.receive_json_from(timeout=10)
        closed = await socket.receive_output(timeout=10)
        await socket.disconnect()
        return reply, closed

    reply, closed = async_to_sync(scenario)()
    assert reply == {"id": 1, "status": 401, "body": {"detail": "invalid node token: register again."}}
    assert closed == {"type": "websocket.close", "code": TOKEN_REVOKED}
    assert over_http(client, name, token, {}).status_code == 401


def test_a_wake_up_reaches_the_socket_after_the_reply_to_the_heartbeat_being_answered(node, settings):
    name, token = node
    settings.MLQ_HEARTBEAT_BATCH_WAIT_S = 0.5  # the heartbeat is still being answered when the wake-up comes

    async def scenario():
        socket = agent_socket(name, token)
        assert (await socket.connect())[0]
        assert await socket.receive_json_from(timeout=10) == HELLO
        await socket.send_json_to({"type": "heartbeat", "id": 1, "body": {}})
        await asyncio.sleep(0.1)
        await sync_to_async(wake_agents)([name], "assigned")
        received = [await socket.receive_json_from(timeout=10) for _ in range(2)]
        await sync_to_async(wake_agents)([name], "signal")
        received.append(await socket.receive_json_from(timeout=10))
        await socket.disconnect()
        return received

    reply, *wakes = async_to_sync(scenario)()
    assert (reply["id"], reply["status"]) == (1, 200)
    assert wakes == [{"wake": "assigned"}, {"wake": "signal"}]


def test_a_socket_whose_channel_layer_cannot_be_read_ends_with_that_error(node, monkeypatch):
    name, token = node
    layer = get_channel_layer()

    async def unreadable(channel):
        raise ConnectionError("Redis went away")

    monkeypatch.setattr(layer, "receive", unreadable)

    async def scenario():
        socket = agent_socket(name, token)
        await socket.send_input({"type": "websocket.connect"})
        with pytest.raises(ConnectionError, match="Redis went away"):
            await socket.wait(timeout=10)

    async_to_sync(scenario)()


def test_a_batch_of_idle_heartbeats_is_one_statement_and_writes_nothing(node, monkeypatch):
    # The epoch is read at most once a second: on a loaded machine the two batches can be
    # further apart than that (a flaky second statement in CI), so its cache lasts the test.
    monkeypatch.setattr("agents.heartbeats.EPOCH_CACHE_S", 3600.0)
    name, token = node
    tokens = {name: token}
    for i in range(19):
        tokens[f"z2-r1-h100-{i:02d}"] = do_register_node(name=f"z2-r1-h100-{i:02d}", inventory=INVENTORY)[1]
    beats = [Beat(name, hash_token(raw), {"tasks": []}) for name, raw in tokens.items()]
    handle_many(beats, transport="socket")  # the new nodes become READY; the epoch is read
    with CaptureQueriesContext(connection) as queries:
        replies = handle_many(beats, transport="socket")
    assert len(queries.captured_queries) == 1, [q["sql"] for q in queries.captured_queries]
    assert all(reply["lease_s"] > 0 and reply["assignments"] == [] for reply in replies)


def test_each_heartbeat_of_a_batch_is_answered_or_refused_on_its_own(node):
    name, token = node
    good = Beat(name, hash_token(token), {"tasks": []})
    outcomes = handle_many(
        [
            good,
            Beat(name, hash_token("wrong"), {}),
            Beat("z1-r1-h100-01", hash_token(token), {}),
            Beat(name, hash_token(token), {"tasks": "x"}),
            good,  # heard twice in one batch: answered twice
        ],
        transport="socket",
    )
    assert outcomes[0]["lease_s"] > 0 and outcomes[4]["lease_s"] > 0
    assert isinstance(outcomes[1], exceptions.AuthenticationFailed)
    assert refused(outcomes[2], name) == (
        403,
        {"detail": f"this token belongs to node {name}; it cannot act for z1-r1-h100-01."},
    )
    assert refused(outcomes[3], name)[0] == 400


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"tasks": []},
        {"tasks": [], "highest_epoch": 3},
        {"highest_epoch": True},
        {"highest_epoch": -1},
        {"highest_epoch": 2**63},
        {"highest_epoch": "3"},
        {"tasks": None},
        {"tasks": [{}]},
        {"tasks": [], "other": 1},
        [],
        "x",
    ],
)
def test_the_idle_heartbeat_shortcut_agrees_with_the_serializer(body):
    serializer = HeartbeatSerializer(data=body)
    if serializer.is_valid():
        assert heartbeat_tasks(body) == serializer.validated_data["tasks"]
    else:
        with pytest.raises(exceptions.ValidationError) as refusal:
            heartbeat_tasks(body)
        assert refusal.value.detail == serializer.errors


def test_sockets_opening_together_are_looked_up_in_one_batch_each_answered_on_its_own(node):
    name, token = node
    others = [do_register_node(name=f"z1-r1-h100-9{i}", inventory=INVENTORY) for i in range(3)]
    asking = [(name, token), *((n.name, t) for n, t in others), (name, "wrong"), (others[0][0].name, token)]

    def batches() -> tuple[float, float]:
        """(sockets looked up, batches) so far."""
        return tuple(
            REGISTRY.get_sample_value(f"mlqueue_heartbeat_batch_size_{kind}", {"work": "sockets"}) or 0.0
            for kind in ("sum", "count")
        )

    async def scenario():
        sockets = [
            WebsocketCommunicator(application, f"/ws/agents/{n}/", headers=[(b"authorization", f"Bearer {t}".encode())])
            for n, t in asking
        ]
        opened = await asyncio.gather(*(socket.connect() for socket in sockets))
        for socket in sockets:
            await socket.disconnect()
        return opened

    before = batches()
    opened = async_to_sync(scenario)()
    # each its own answer: the four nodes' own tokens open, a wrong token and another node's do not
    assert [ok for ok, _ in opened] == [True, True, True, True, False, False]
    assert [code for ok, code in opened if not ok] == [4003, 4003]
    looked_up, batched = (after - was for after, was in zip(batches(), before, strict=True))
    assert looked_up == 6 and batched < 6
