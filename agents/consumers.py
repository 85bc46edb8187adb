"""The agent's WebSocket: its heartbeats, and the server's "heartbeat now" nudges.

An agent opens it with its node token, as for any agent request, and the server greets it with
`{"hello": {"heartbeats": true}}`. From then on the agent sends its heartbeats on it,
`{"type": "heartbeat", "id": 7, "body": <the HTTP heartbeat's body>}`, and each gets
`{"id": 7, "status": 200, "body": <the HTTP heartbeat's reply>}`: the same function answers
both (agents/heartbeats.py), with the same refusals and the same error bodies (a 401 when the
node's token was reset since the socket opened, then the socket closes). An agent that has no
socket, or a server that never says hello, heartbeats over HTTP as before.

The server also nudges the socket, `{"wake": reason}`, when the node gets an assignment or a
signal: the agent then heartbeats at once instead of at its next regular beat.

Heartbeats from all the sockets of a process are answered in batches (agents/batches.py):
that, and no HTTP request to parse per beat, is what makes a socket heartbeat cheap."""

import asyncio
import functools

from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import get_channel_layer
from django.conf import settings

from agents.batches import answer_heartbeat, socket_owner
from agents.heartbeats import Beat, refused
from mlqueue.channel_layer import TRY_AGAIN_LATER, join_group, leave_group
from mlqueue.errors import BODY_TOO_LARGE, RequestTooLarge
from mlqueue.parsers import BodyError, loads_body
from scheduling.notify import agent_group
from teams.models import hash_token

HELLO = {"hello": {"heartbeats": True}}
TOKEN_REVOKED = 4001  # the close code after a heartbeat refused for its token: register again
NOT_AN_OBJECT = "send a JSON object: {type, id, body}."
UNKNOWN_TYPE = "unknown message type {kind!r}; the agent socket takes 'heartbeat'."
BAD_ID = "a non-negative integer the reply will carry back."
NOT_TEXT = "send text frames (JSON)."


class AgentSocketConsumer(AsyncJsonWebsocketConsumer):
    async def __call__(self, scope, receive, send):
        """Channels' consumer, with the socket and the channel layer read by a loop each. Channels
        waits on both together (asyncio.wait and a new task for every message: ~10 µs of the event
        loop per heartbeat, against ~2 µs for a plain loop); here the socket's messages are read in
        a plain loop and the layer's (the wake-ups) by a task of its own. As under Channels, one
        message is handled at a time (a wake-up waits for the heartbeat being answered, and for
        the hello), and a failure to read the layer ends the consumer (the socket closes, 1011).
        As Channels does, the consumer ends only once its layer's reader has: a reader cancelled
        but not awaited would still be reading the layer after the socket is gone."""
        self.scope, self.base_send = scope, send
        self.channel_layer = get_channel_layer(self.channel_layer_alias)
        self.channel_name = await self.channel_layer.new_channel()
        self.channel_receive = functools.partial(self.channel_layer.receive, self.channel_name)
        one_at_a_time = asyncio.Lock()
        listening = asyncio.ensure_future(self._handle_each(self.channel_receive, one_at_a_time))
        serving = asyncio.current_task()
        listening.add_done_callback(lambda done: done.cancelled() or done.exception() is None or serving.cancel())
        try:
            await self._handle_each(receive, one_at_a_time)
        except StopConsumer:
            pass
        except asyncio.CancelledError:
            if listening.done() and not listening.cancelled() and listening.exception() is not None:
                raise listening.exception() from None
            raise
        finally:
            listening.cancel()
            await asyncio.wait([listening])  # without raising: its failure, if any, was raised above

    async def _handle_each(self, receive, one_at_a_time: asyncio.Lock):
        while True:
            message = await receive()
            async with one_at_a_time:
                await self.dispatch(message)

    async def connect(self):
        headers = dict(self.scope.get("headers", []))
        kind, _, raw = headers.get(b"authorization", b"").decode("latin1").partition(" ")
        name = self.scope["url_route"]["kwargs"]["name"]
        digest = hash_token(raw.strip()) if kind.lower() == "bearer" and raw.strip() else ""
        owner = await socket_owner(digest) if digest else None
        if isinstance(owner, Exception):  # Postgres away: the agent heartbeats over HTTP meanwhile
            await self.close(code=TRY_AGAIN_LATER)
            return
        if owner != name:
            await self.close(code=4003)
            return
        if await join_group(self, agent_group(name)):
            self.name, self.token_digest, self.group = name, digest, agent_group(name)
            await self.accept()
            await self.send_json(HELLO)

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await leave_group(self, self.group)

    async def dispatch(self, message):
        # Channels closes stale database connections before each message, in a thread hop of its
        # own that costs as much CPU as a batched heartbeat; the batch's own hop does it instead.
        if message["type"] == "websocket.receive":
            return await self.websocket_receive(message)
        return await super().dispatch(message)

    async def receive(self, text_data=None, bytes_data=None):
        id_, outcome = self._request(text_data)
        if not isinstance(outcome, Exception):
            outcome = await answer_heartbeat(outcome)
        status, body = (200, outcome) if not isinstance(outcome, Exception) else refused(outcome, self.name)
        await self.send_json({"id": id_, "status": status, "body": body})
        if status == 401:
            await self.close(code=TOKEN_REVOKED)

    def _request(self, text: str | None) -> tuple[int | None, Beat | Exception]:
        """(the request's id, the heartbeat it carries), or why it is refused."""
        if text is None:
            return None, BodyError("body", NOT_TEXT)
        raw = text.encode()
        if len(raw) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
            return None, RequestTooLarge(BODY_TOO_LARGE.format(limit=settings.DATA_UPLOAD_MAX_MEMORY_SIZE))
        try:
            message = loads_body(raw)
        except BodyError as exc:
            return None, exc
        if not isinstance(message, dict):
            return None, BodyError("body", NOT_AN_OBJECT)
        id_ = message.get("id")
        if type(id_) is not int or id_ < 0:
            return None, BodyError("id", BAD_ID)
        if message.get("type") != "heartbeat":
            return id_, BodyError("type", UNKNOWN_TYPE.format(kind=message.get("type")))
        return id_, Beat(self.name, self.token_digest, message.get("body", {}))

    async def agent_wake(self, event):
        await self.send_json({"wake": event.get("reason", "")})
