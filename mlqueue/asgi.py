"""HTTP and WebSocket routing. WebSocket routes are added by the apps that push live views."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlqueue.settings")
django.setup(set_prefix=False)  # as django.core.asgi.get_asgi_application does

from mlqueue.autobahn_options import make_debug_lines_cheap  # noqa: E402
from mlqueue.onehop import OneHopASGIHandler  # noqa: E402

make_debug_lines_cheap()

django_asgi_app = OneHopASGIHandler()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.urls import re_path  # noqa: E402

from mlqueue.fastlane import HeartbeatLane  # noqa: E402
from mlqueue.health import HealthLane  # noqa: E402
from mlqueue.proxies import TrustedProxyHeaders  # noqa: E402
from mlqueue.routing import agent_websocket_urlpatterns, websocket_urlpatterns  # noqa: E402
from mlqueue.submit_lane import SubmitLane  # noqa: E402
from mlqueue.websocket_origin import SameOriginValidator  # noqa: E402

# Session-authenticated, so only from this site's own origin: scheme, host and port (not just the host).
browser_sockets = SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))

# Outermost: the client's address and scheme, from X-Forwarded-* only where a trusted proxy
# sent them (MLQ_TRUSTED_PROXIES), before anything reads them.
application = TrustedProxyHeaders(
    ProtocolTypeRouter(
        {
            "http": HealthLane(HeartbeatLane(SubmitLane(django_asgi_app)), allowed_hosts=settings.ALLOWED_HOSTS),
            "websocket": URLRouter([*agent_websocket_urlpatterns, re_path(r"", browser_sockets)]),
        }
    )
)

from mlqueue.gc_tuning import tune_for_server  # noqa: E402

tune_for_server(settings.MLQ_GC_YOUNG_THRESHOLD)  # last: everything imported so far is for good
