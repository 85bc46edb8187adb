"""A WebSocket on which the server tells an agent "heartbeat now": when its node gets an
assignment or a signal. Only a nudge: everything it must do still comes in the heartbeat
reply, and without this socket the agent learns the same at its next regular heartbeat."""

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from mlqueue.channel_layer import join_group
from scheduling.models import Node
from scheduling.notify import agent_group
from teams.models import hash_token


@database_sync_to_async
def _node_by_token(raw: str) -> str | None:
    return Node.objects.filter(token_digest=hash_token(raw)).values_list("name", flat=True).first()


class AgentWakeConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        headers = dict(self.scope.get("headers", []))
        kind, _, raw = headers.get(b"authorization", b"").decode("latin1").partition(" ")
        name = self.scope["url_route"]["kwargs"]["name"]
        owner = await _node_by_token(raw.strip()) if kind.lower() == "bearer" and raw else None
        if owner != name:
            await self.close(code=4003)
            return
        if await join_group(self, agent_group(name)):
            self.group = agent_group(name)
            await self.accept()

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def agent_wake(self, event):
        await self.send_json({"wake": event.get("reason", "")})
