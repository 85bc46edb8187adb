"""A lane in front of Django for single submits, `POST /api/v1/jobs` (issue 19: 500 a second).

Through Django and DRF a submit cost about 10 ms of web CPU and 2.4 ms of Postgres's, of which
the request's way in and out was 1.9 ms and each submit's own transaction most of Postgres's
(BENCHMARKS.md, "The web tier's floor under a single submit"). This lane takes a submit before
Django's handler and puts it in the process's current group: the submits that arrived while the
previous group was written go in one thread hop and one transaction together
(scheduling/web/grouped_submits.py), each answered as the view answers it, with the same
headers. A submit alone is a group of one and waits for nothing.

What the lane does not answer itself it hands to Django unchanged, its body as read: a path with
a query, a body that is not plain JSON of known length within MLQ_MAX_BODY_BYTES, an Accept
other than JSON's, no bearer token (the browser's session and its CSRF check), a cookie (a
stale session's is deleted in Django's answer), anything
Django's middleware would refuse or redirect (mlqueue.fastlane.refusal), and whatever
grouped_submits leaves to it (a refused spec, a schedule, a group, the rate limit). Off with
MLQ_SUBMIT_LANE=0."""

import asyncio
import weakref

from asgiref.sync import sync_to_async
from django.conf import settings

from mlqueue.fastlane import refusal
from scheduling.web.grouped_submits import Submit, answer_submits

SUBMIT_PATHS = frozenset({"/api/v1/jobs", "/api/v1/jobs/"})
JSON_ACCEPTS = frozenset({b"", b"*/*", b"application/json"})
GROUP_MAX = 64  # submits written together at most: a group's transaction stays short
ONCE = (b"authorization", b"content-type", b"content-length", b"accept", b"host")  # headers read here


class SubmitLane:
    def __init__(self, django_app):
        self.django_app = django_app
        self._groups: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # per event loop

    async def __call__(self, scope, receive, send):
        if not self._takes(scope):
            return await self.django_app(scope, receive, send)
        messages, body = await _read_body(receive)
        if body is not None:
            submit = Submit(scope, body)
            await self._group().answer(submit)
            if submit.answer is not None:
                return await _send(send, submit.answer)
        await self.django_app(scope, _replay(messages, receive), send)

    @staticmethod
    def _takes(scope) -> bool:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in SUBMIT_PATHS:
            return False
        if scope.get("query_string") or not settings.MLQ_SUBMIT_LANE:
            return False
        names = [name.lower() for name, _ in scope.get("headers", ())]
        if b"transfer-encoding" in names or b"cookie" in names or any(names.count(name) > 1 for name in ONCE):
            return False  # a cookie: Django's sessions may answer with headers of their own
        headers = dict(scope["headers"])
        media_type = headers.get(b"content-type", b"").split(b";", 1)[0].strip().lower()
        authorization = headers.get(b"authorization", b"").split()
        return (
            media_type == b"application/json"
            and headers.get(b"content-length", b"").isdigit()
            and headers.get(b"accept", b"").strip() in JSON_ACCEPTS
            and len(authorization) == 2
            and authorization[0].lower() == b"bearer"
            and refusal(scope, headers, quiet=True) is None
        )

    def _group(self) -> "_Group":
        loop = asyncio.get_running_loop()
        group = self._groups.get(loop)
        if group is None:
            group = self._groups[loop] = _Group()
        return group


class _Group:
    """The submits waiting in one event loop, and the task that writes them a group at a time."""

    def __init__(self):
        self.waiting: list[tuple[Submit, asyncio.Future]] = []
        self.writer: asyncio.Task | None = None

    async def answer(self, submit: Submit) -> None:
        future = asyncio.get_running_loop().create_future()
        self.waiting.append((submit, future))
        if self.writer is None:
            self.writer = asyncio.ensure_future(self._write())
        await future

    async def _write(self) -> None:
        try:
            while self.waiting:
                taken, self.waiting = self.waiting[:GROUP_MAX], self.waiting[GROUP_MAX:]
                try:
                    await sync_to_async(answer_submits, thread_sensitive=True)([submit for submit, _ in taken])
                except Exception as exc:  # answer_submits answers its own errors: a 500 each
                    for _, future in taken:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for _, future in taken:
                    if not future.done():  # its client went away meanwhile
                        future.set_result(None)
        finally:
            self.writer = None


async def _read_body(receive) -> tuple[list[dict], bytes | None]:
    """The messages read, and the body: None past MLQ_MAX_BODY_BYTES or when the client left
    (Django answers those from the messages read)."""
    messages, size = [], 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages, None
        size += len(message.get("body", b""))
        if size > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
            return messages, None
        if not message.get("more_body"):
            return messages, b"".join(m.get("body", b"") for m in messages)


def _replay(messages: list[dict], receive):
    """A receive that gives Django the messages the lane read, then the client's own."""
    pending = list(messages)

    async def replayed():
        return pending.pop(0) if pending else await receive()

    return replayed


async def _send(send, response) -> None:
    headers = [(name.encode("ascii"), value.encode("latin1")) for name, value in response.items()]
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": response.content})
