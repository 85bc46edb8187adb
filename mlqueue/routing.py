"""WebSocket URL patterns, one list for the whole project."""

websocket_urlpatterns: list = []
