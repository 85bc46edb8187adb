"""Sends the browser, not an htmx fragment, to the login page.

When a session ends elsewhere (logged out in another tab, expired), the pages' htmx requests (the
queue's live table, the job panel, the nodes heatmap, a form's post) meet `login_required`'s 302 to
the login page. The browser's XMLHttpRequest follows a redirect by itself, so htmx got the login
page as a 200 and swapped it into the panel, where its form posted to the fragment's URL. Here
such an answer becomes a 401 with `HX-Redirect`, which htmx follows with a full page load, before
it looks at the status (a 401 swaps nothing). The `next` it carries is the page the user was on
(htmx's HX-Current-URL, when it is this site's), not the fragment's URL.
"""

from urllib.parse import urlencode, urlsplit

from django.conf import settings
from django.http import HttpResponse
from django.shortcuts import resolve_url
from django.utils.http import url_has_allowed_host_and_scheme

LOGIN_NEEDED = "Your session has ended: log in again.\n"


class HtmxLoginRedirect:
    """After AuthenticationMiddleware: rewrites a redirect to LOGIN_URL that answers an htmx
    request, whichever view or decorator sent it."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if not request.headers.get("HX-Request") or not _goes_to_login(response):
            return response
        refusal = HttpResponse(LOGIN_NEEDED, status=401, content_type="text/plain; charset=utf-8")
        refusal["HX-Redirect"] = login_url_for(request)
        return refusal


def _goes_to_login(response) -> bool:
    if response.status_code not in (301, 302, 303, 307, 308) or "Location" not in response:
        return False
    return urlsplit(response["Location"]).path == urlsplit(resolve_url(settings.LOGIN_URL)).path


def login_url_for(request) -> str:
    """The login page, with `next` the page htmx says the browser shows (its path and query)
    when that page is on this site; without `next` otherwise (the login then goes home)."""
    login = resolve_url(settings.LOGIN_URL)
    current = request.headers.get("HX-Current-URL", "")
    if not current or not url_has_allowed_host_and_scheme(
        current, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return login
    parts = urlsplit(current)
    page = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return f"{login}?{urlencode({'next': page}, safe='/')}"
