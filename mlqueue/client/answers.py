"""What the Client makes of an answer: a refusal as an MlqError, a body that is not JSON, a
redirect, a request that got no answer, which failures are an outage to wait out (a connection
that fails, a 502, 503 or 504), and the events of a streamed log."""

import html
import math
import re
import time
from collections.abc import Iterable, Iterator
from urllib.parse import quote

import httpx

from mlqueue.client.errors import MlqError

API = "/api/v1"
BATCH_INDEX = re.compile(r"\bjobs\[(\d+)\]")
NOT_THE_API = (
    "{status}: {server} answered with a web page, not the API: is the server the site's address"
    " (e.g. https://mlqueue.example.com, without /api/v1)?"
)
NOT_JSON = (
    "{status}: {server} answered with {kind}, not the API's JSON (a sign-in page in front of the site?):"
    " is the server the site's address?"
)
UNREACHABLE = "cannot reach {server}: {error}"
TIMED_OUT = "timed out waiting for the server ({seconds} s): {server} was reached but has not answered"
REDIRECTED = "{status}: the server redirects to {location}: use that URL as --server / MLQ_SERVER"
REDIRECTED_NOWHERE = "{status}: the server redirects without saying where to: is the server the site's address?"
# An outage to wait out: a connection refused or cut, or a proxy's "the site is not there".
OUTAGE_STATUSES = (502, 503, 504)
HTML_HEADING = re.compile(r"<(title|h1)[^>]*>(.*?)</\1\s*>", re.IGNORECASE | re.DOTALL)
TAG = re.compile(r"<[^>]*>")
FIRST_BACKOFF_S, LONGEST_BACKOFF_S = 0.5, 5.0
SELF_REFERENCE = "{field}: holds itself (a mapping or list inside itself): JSON cannot send it"


def is_outage(error: MlqError) -> bool:
    """A failure that may pass by itself: no connection (status 0 from a transport error) or a
    502, 503 or 504."""
    return error.status in OUTAGE_STATUSES or isinstance(error.__cause__, httpx.TransportError)


class Backoff:
    """The waits between tries during an outage: 0.5 s, doubling up to 5 s; a Retry-After given
    by the server instead. `reset()` once a try succeeds."""

    def __init__(self):
        self.wait = FIRST_BACKOFF_S

    def next(self, error: MlqError | None = None) -> float:
        if error is not None and error.retry_after is not None:
            return error.retry_after
        wait, self.wait = self.wait, min(self.wait * 2, LONGEST_BACKOFF_S)
        return wait

    def reset(self) -> None:
        self.wait = FIRST_BACKOFF_S


def json_body(response: httpx.Response, server: str):
    """The answer's JSON; a 2xx that is not JSON (a sign-in page, a proxy's, nothing at all) is an
    MlqError, never None where the caller reads a dict."""
    try:
        return response.json()
    except ValueError:
        kind = response.headers.get("content-type", "").split(";")[0] or "no content type"
        kind = kind if response.content else "an empty body"
        status = response.status_code
        raise MlqError(status, NOT_JSON.format(status=status, server=server, kind=kind)) from None


def no_answer(error: httpx.HTTPError, *, server: str, timeout) -> str:
    """Why a request got no answer. A read (or a write) that timed out reached the server, which
    is slow; anything else (no connection, a refused one, a certificate) never reached it."""
    if isinstance(error, httpx.ReadTimeout | httpx.WriteTimeout):
        seconds = getattr(timeout, "read", timeout)
        return TIMED_OUT.format(seconds=f"{seconds:g}" if isinstance(seconds, int | float) else seconds, server=server)
    return UNREACHABLE.format(server=server, error=error)


def redirected(response: httpx.Response) -> MlqError:
    """A 3xx: the API redirects nowhere, so the server given is not the site's own address (http://
    of an https:// site, a host the site moved from). Named as the address to give instead: the
    Location without the API's path."""
    status, location = response.status_code, response.headers.get("Location")
    if not location:
        return MlqError(status, REDIRECTED_NOWHERE.format(status=status))
    try:
        url = response.request.url.join(location)
    except RuntimeError:  # a response built without its request
        url = httpx.URL(location)
    if API in url.path:
        url = url.copy_with(path=url.path.split(API, 1)[0], query=None, fragment=None)
    return MlqError(status, REDIRECTED.format(status=status, location=url))


def server_sent_events(lines: Iterable[str]) -> Iterator[tuple[str, str]]:
    """(event, data) of each event in a text/event-stream's lines; comments and `id:`/`retry:` skipped."""
    name, data = "message", []
    for line in lines:
        if not line:
            if data:
                yield name, "\n".join(data)
            name, data = "message", []
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
    # an event cut off before its blank line is dropped, as EventSource does


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After", "")
    return float(value) if value.isdigit() else None


def _renumbered(refused: MlqError, offset: int) -> MlqError:
    """A batch's refusal with `jobs[i]` counted among all the specs sent, not within its batch."""

    def shift(text: str) -> str:
        return BATCH_INDEX.sub(lambda m: f"jobs[{int(m[1]) + offset}]", text)

    fields = {shift(field): messages for field, messages in refused.fields.items()}
    return MlqError(refused.status, shift(refused.detail), fields, retry_after=refused.retry_after)


def _refusal(response: httpx.Response) -> MlqError:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "detail" in body:
        fields = body.get("fields") if isinstance(body.get("fields"), dict) else {}
        return MlqError(response.status_code, str(body["detail"]), fields, retry_after=_retry_after(response))
    if response.status_code == 404 and "html" in response.headers.get("content-type", ""):
        try:
            server = str(response.request.url).rsplit(API, 1)[0]
        except RuntimeError:  # a response built without its request
            server = "the server"
        return MlqError(404, NOT_THE_API.format(status=404, server=server))
    text = _page_heading(response) or (response.text.strip().splitlines() or [response.reason_phrase])[0][:200]
    if not text.startswith(str(response.status_code)):
        text = f"{response.status_code} {text}"
    return MlqError(response.status_code, text, retry_after=_retry_after(response))


def _page_heading(response: httpx.Response) -> str:
    """An HTML page's title (else its first heading) as text: `502 Bad Gateway` from a proxy's
    page, `Server Error (500)` from Django's, rather than the page's first line (`<!DOCTYPE html>`)."""
    body = response.text
    if "html" not in response.headers.get("content-type", "") and not body.lstrip().startswith("<"):
        return ""
    for found in HTML_HEADING.finditer(body):
        heading = " ".join(html.unescape(TAG.sub(" ", found[2])).split())
        if heading:
            return heading[:200]
    return response.reason_phrase


def _not_finite(value, path: str = "", inside: tuple[int, ...] = ()) -> tuple[str, float] | None:
    """The dotted path and value of the first nan or infinity in a request body, if any. A
    mapping or list inside itself (`inside`: the ids of those it is in) is an MlqError naming
    where: JSON cannot carry it, and walking it would never end."""
    if isinstance(value, float) and not math.isfinite(value):
        return path or "body", value
    if not isinstance(value, dict | list):
        return None
    if id(value) in inside:
        raise MlqError(0, SELF_REFERENCE.format(field=path or "body"))
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        found = _not_finite(item, f"{path}.{key}" if path else str(key), (*inside, id(value)))
        if found is not None:
            return found
    return None


def through_outages(call, *args, deadline: float | None = None, **kwargs):
    """`call(*args, **kwargs)`, tried again through an outage (no connection, 502/503/504; Retry-After
    honoured) with a short back-off, until `deadline` (time.monotonic; None: for as long as it lasts)."""
    backoff = Backoff()
    while True:
        try:
            return call(*args, **kwargs)
        except MlqError as error:
            pause = backoff.next(error) if is_outage(error) else None
            if pause is None or (deadline is not None and time.monotonic() + pause > deadline):
                raise
            time.sleep(pause)


def segment(value) -> str:
    """A name or id as one path segment: "../jobs" must not reach another endpoint (and "." or
    "..", which no quoting hides from the URL's normalization, are no name)."""
    if str(value) in ("", ".", ".."):
        raise MlqError(0, f"{str(value)!r} is not a name or id")
    return quote(str(value), safe="")
