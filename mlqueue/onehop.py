"""Django's ASGI handler with the synchronous request path in one thread hop.

mlqueue's middleware and views are synchronous. Django's own ASGI handler builds an async
middleware chain and adapts each synchronous hook on its own (sync_to_async per middleware
and for the view: a hop to the thread that runs synchronous code, and back, each). This
handler builds the chain Django builds under WSGI and runs it, view included, in one hop onto
that same thread (thread_sensitive, so database connections stay where they were). The rest
(reading the request, signals, streaming the response, a client that goes away) is
ASGIHandler's own. The agent heartbeat skips Django entirely (mlqueue/fastlane.py)."""

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler


class OneHopASGIHandler(ASGIHandler):
    def load_middleware(self, is_async=False):
        super().load_middleware(is_async=False)

    async def get_response_async(self, request):
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)
