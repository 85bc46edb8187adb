"""WebSocket URL patterns. Browser sockets must come from our own origin (scheme, host and port:
mlqueue/websocket_origin.py) and are authenticated by session; agent sockets (no browser, no
Origin) by their node token."""

from django.urls import path

from agents.consumers import AgentSocketConsumer
from scheduling.web.consumers import JobsConsumer

agent_websocket_urlpatterns = [
    path("ws/agents/<str:name>/", AgentSocketConsumer.as_asgi()),
]

websocket_urlpatterns = [
    path("ws/jobs/", JobsConsumer.as_asgi()),
    path("ws/jobs/<int:job_id>/", JobsConsumer.as_asgi()),
]
