"""The Client: one server, one token; every call of the API, waiting for a job, its logs
(streamed), and login."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx

from mlqueue.client.answers import (
    API,
    BATCH_INDEX,  # noqa: F401 (names mlq and tests import from here)
    NOT_THE_API,  # noqa: F401
    UNREACHABLE,  # noqa: F401
    Backoff,
    _not_finite,
    _refusal,
    _renumbered,
    is_outage,
    json_body,
    no_answer,
    redirected,
    segment,
    server_sent_events,
    through_outages,
)
from mlqueue.client.batching import batches
from mlqueue.client.config import credentials, read_config, write_config
from mlqueue.client.errors import MlqError
from mlqueue.client.fleet import FleetCalls
from mlqueue.client.results import (
    CancelResult,
    Child,
    Delivery,
    DryRun,
    Event,
    Fire,
    Job,
    QueueEntry,
    Quota,
    Schedule,
    Submitted,
    Team,
    Token,
    Why,
)
from mlqueue.client.specs import apply_overrides, load_spec

# A batch's size (the server takes up to 1,000 specs and MLQ_MAX_BODY_BYTES, 256 KiB by default).
BATCH_MAX_WAIT_S = 300.0
NO_SERVER = "no server: set MLQ_SERVER, pass server=, or run `mlq login --server URL`"
NO_USER = "who are you? set MLQ_USER, or run `mlq login` (it records your user name)"
WAIT_TIMED_OUT = "job {job} still {state} after {timeout:g} s"
NO_SCHEDULE_BLOCK = (
    "the spec has no schedule: block (e.g. schedule: {cron: '0 3 * * *', timezone: Europe/Berlin}); nothing was sent"
)
BAD_SERVER = "the server {server!r} is not a URL ({error}): give the site's address, e.g. https://mlqueue.example.com"
BAD_TOKEN = "the token (MLQ_TOKEN, token= or the config file) holds characters no token has: copy it again"
NOT_FINITE = "{field}: must be a finite number, not {value}"

NOT_A_JOB_ID = "{job!r} is not a job id: give a number, e.g. 42"
POLL_S = 2.0


NOT_HTTP = "it names no http:// or https:// site"


def server_problem(server: str) -> str | None:
    """Why `server` is no site's address (`notaurl`, `localhost:8000`, `http://[bad`), or None."""
    try:
        parts = urlsplit(server)
    except ValueError as error:
        return str(error)
    return None if parts.scheme.lower() in ("http", "https") and parts.netloc else NOT_HTTP


def _query_value(value):
    """A filter's value in a query string: booleans as the API reads them (true/false)."""
    return ("true" if value else "false") if isinstance(value, bool) else value


def _id(job) -> int:
    if isinstance(job, Job | QueueEntry):
        return job.id
    try:
        return int(job)
    except (TypeError, ValueError):
        raise MlqError(0, NOT_A_JOB_ID.format(job=job)) from None


def _attempt_after(current: Job, rank: int, attempt: int | None) -> int | None:
    """The attempt after `attempt` when the rank has made one since, else None: each start is the
    next number, so stepping by one reads every attempt, one that ran between two polls too."""
    latest = max((task.attempt for task in current.tasks if task.rank == rank), default=None)
    return attempt + 1 if attempt and latest and latest > attempt else None


class Client(FleetCalls):
    """One server, one token. `transport` is for tests (httpx.MockTransport)."""

    def __init__(self, server: str | None = None, token: str | None = None, *, transport=None, timeout: float = 30):
        config = read_config()
        self.server = (server or os.environ.get("MLQ_SERVER") or config.get("server") or "").rstrip("/")
        # the user: who the token belongs to, as `mlq login` recorded it (`--mine` asks the server for "me")
        self.token, self.user, self.no_token = credentials(self.server, token, config)
        self.log_capped: dict | None = None  # {attempt, chars}: the last log read reached the server's cap
        self._transport, self._timeout = transport, timeout
        self._http: httpx.Client | None = None
        # each job's detail as last read, so that a wait or a follow cut short (Ctrl-C) can say where it stood
        self.last_read: dict[int, Job] = {}

    # plumbing

    def _client(self) -> httpx.Client:
        if not self.server:
            raise MlqError(0, NO_SERVER)
        if problem := server_problem(self.server):  # before the token: "no token for notaurl" misleads (QA)
            raise MlqError(0, BAD_SERVER.format(server=self.server, error=problem))
        if self._http is None:
            headers = {"Accept": "application/json", "User-Agent": "mlq"}
            try:
                self._http = httpx.Client(
                    base_url=self.server, headers=headers, transport=self._transport, timeout=self._timeout
                )
            except httpx.InvalidURL as error:
                raise MlqError(0, BAD_SERVER.format(server=self.server, error=error)) from None
        return self._http

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def request(self, method: str, path: str, *, json=None, params=None, auth: bool = True, text: bool = False) -> Any:
        """The answer's JSON (`text`: its body as text, for CSV); None for a 204 alone."""
        return self._answer(method, path, json=json, params=params, auth=auth, text=text)[1]

    def _answer(self, method: str, path: str, *, json=None, params=None, auth=True, text=False) -> tuple[int, Any]:
        """(status, body): the status tells a 201 (made now) from a 200 (a replay, made before)."""
        self._client()  # a server that is no URL is said first, whatever the token
        if auth and not self.token:
            raise MlqError(0, self.no_token)
        if auth and not (self.token.isascii() and self.token.isprintable()):
            raise MlqError(0, BAD_TOKEN)
        params = {key: value for key, value in (params or {}).items() if value is not None}
        if (where := _not_finite(json)) is not None:  # JSON has no nan or inf: say which, not a traceback
            raise MlqError(0, NOT_FINITE.format(field=where[0], value=where[1]))
        # Never an old token with a password: an expired one would fail the login itself.
        headers = {"Authorization": f"Bearer {self.token}"} if auth else {}
        try:
            response = self._client().request(method, API + path, json=json, params=params or None, headers=headers)
        except httpx.InvalidURL as error:
            raise MlqError(0, BAD_SERVER.format(server=self.server, error=error)) from None
        except httpx.HTTPError as error:
            raise MlqError(0, no_answer(error, server=self.server, timeout=self._timeout)) from error
        if 300 <= response.status_code < 400:
            raise redirected(response)
        if response.status_code >= 400:
            raise _refusal(response)
        if response.status_code == 204:
            return 204, None
        return response.status_code, response.text if text else json_body(response, self.server)

    def _pages(self, path: str, params: dict) -> Iterator[dict]:
        """Every row of a cursor-paginated list (`{"next", "results"}`), following `next`."""
        data = self.request("GET", path, params=params)
        while True:
            if isinstance(data, list):
                yield from data
                return
            yield from data.get("results", [])
            following = data.get("next")
            if not following:
                return
            url = httpx.URL(following)  # every value of a repeated parameter (?state=A&state=B), not the first
            data = self.request("GET", path, params={key: url.params.get_list(key) for key in url.params})

    # jobs

    def submit(self, spec_or_path, *, set: Iterable[str] = (), **overrides) -> Job | Schedule:  # noqa: A002
        """The job submitted; for a spec with a `schedule:` block, the Schedule it created
        (no job is submitted then: the schedule submits one at each fire time). `existing`: the
        server had it already (the same client_job_id and spec, or a schedule of these settings)."""
        spec = apply_overrides(load_spec(spec_or_path), set, **overrides)
        status, answer = self._answer("POST", "/jobs", json=spec)
        made = Schedule.from_json(answer["schedule"]) if answer.get("created") == "schedule" else Job.from_json(answer)
        return dataclasses.replace(made, existing=status == 200)  # its client_job_id's, or these settings'

    def submit_many(self, specs: Iterable[dict], *, max_wait: float = BATCH_MAX_WAIT_S) -> list[Submitted]:
        """Submit job specs in batches (POST /api/v1/jobs/batch): a Submitted per spec, in order.
        Batches are cut as batching.py says (specs, bytes and jobs made); past the submit rate (429) a
        batch is sent again once the server says it may, waiting up to `max_wait` s in all. A
        refused batch raises MlqError naming `jobs[i]` by the spec's place among all `specs`;
        the batches before it stay submitted (give client_job_ids and a rerun submits nothing twice)."""
        found: list[Submitted] = []
        waited = 0.0
        for offset, chunk in batches(list(specs)):
            while True:
                try:
                    answer = self.request("POST", "/jobs/batch", json={"jobs": chunk})
                    break
                except MlqError as refused:
                    if refused.status == 429 and refused.retry_after and waited + refused.retry_after <= max_wait:
                        time.sleep(refused.retry_after)
                        waited += refused.retry_after
                        continue
                    raise _renumbered(refused, offset) from None
            found += [Submitted.from_json({**row, "index": row["index"] + offset}) for row in answer["jobs"]]
        return found

    def dry_run(self, spec_or_path, *, set: Iterable[str] = (), **overrides) -> DryRun:  # noqa: A002
        spec = apply_overrides(load_spec(spec_or_path), set, **overrides)
        return DryRun.from_json(self.request("POST", "/jobs/dry-run", json=spec))

    def get(self, job) -> Job:
        found = Job.from_json(self.request("GET", f"/jobs/{_id(job)}"))
        self.last_read[found.id] = found
        return found

    def state_now(self, job, *, timeout: float) -> str:
        """The job's state read once within `timeout` seconds: what Ctrl-C names when a followed
        log, which reads no state, was cut short."""
        http = self._client()
        kept, http.timeout = http.timeout, httpx.Timeout(timeout)
        try:
            return self.get(job).state
        finally:
            http.timeout = kept

    def jobs(self, *, limit: int | None = None, **filters) -> list[Job]:
        """Newest first; filters as the API's: team, state, priority, owner ("me": whoever the token
        is), submitted_after, parent (a group's children), top_level=True (groups and single jobs,
        not groups' children), ..."""
        if limit is not None and limit < 1:
            raise MlqError(0, "limit: must be at least 1 (None: every job)")
        filters = {key: _query_value(value) for key, value in filters.items()}
        params = {**filters, "limit": min(limit, 500) if limit else None}
        found = []
        for row in self._pages("/jobs", params):
            found.append(Job.from_json(row))
            if limit and len(found) >= limit:
                break
        return found

    def queue(
        self, *, team: str | None = None, priority: str | None = None, owner: str | None = None
    ) -> list[QueueEntry]:
        """The queue in scheduling order; `owner`: a user name, or "me" (whoever the token is)."""
        entries, offset = [], 0
        while True:
            params = {"team": team, "priority": priority, "owner": owner, "offset": offset}
            page = self.request("GET", "/queue", params=params)
            rows = page.get("results", [])
            entries += [QueueEntry.from_json(row) for row in rows]
            offset += len(rows)
            if not rows or offset >= page.get("count", 0):
                return entries

    def children(self, job) -> list[Child]:
        """A group's children as the server orders them: an array's by index, a sweep's best first
        by its metric (trials that have not reported it last); [] for a job that is not a group."""
        return [Child.from_json(row) for row in self.request("GET", f"/jobs/{_id(job)}/children")]

    # schedules (docs/schedules.md)

    def schedules(self) -> list[Schedule]:
        return [Schedule.from_json(row) for row in self._pages("/schedules", {})]

    def schedule(self, schedule_id: int) -> Schedule:
        return Schedule.from_json(self.request("GET", f"/schedules/{segment(schedule_id)}"))

    def create_schedule(self, spec_or_path, *, set: Iterable[str] = (), **overrides) -> Schedule:  # noqa: A002
        """From a spec with a `schedule:` block (the block holds cron, timezone, concurrency, ...);
        refused before anything is sent when the spec has none (it would submit a job)."""
        spec = apply_overrides(load_spec(spec_or_path), set, **overrides)
        if not isinstance(spec.get("schedule"), dict):
            raise MlqError(0, NO_SCHEDULE_BLOCK)
        status, answer = self._answer("POST", "/jobs", json=spec)
        return dataclasses.replace(Schedule.from_json(answer["schedule"]), existing=status == 200)

    def change_schedule(self, schedule_id: int, **changes) -> Schedule:
        return Schedule.from_json(self.request("PATCH", f"/schedules/{segment(schedule_id)}", json=changes))

    def suspend_schedule(self, schedule_id: int, reason: str = "") -> Schedule:
        return self.change_schedule(schedule_id, suspended=True, reason=reason)

    def resume_schedule(self, schedule_id: int) -> Schedule:
        return self.change_schedule(schedule_id, suspended=False)

    def run_schedule(self, schedule_id: int) -> Fire:
        """Run now: an ordinary run, honouring the schedule's concurrency (forbid: refused while
        its last run is active)."""
        return Fire.from_json(self.request("POST", f"/schedules/{segment(schedule_id)}/run"))

    def delete_schedule(self, schedule_id: int) -> None:
        self.request("DELETE", f"/schedules/{segment(schedule_id)}")

    def metrics(self, job, name: str | None = None, **filters) -> Any:
        """The metrics a job reported (`mlqueue.report(...)`), as the server's
        `GET /api/v1/jobs/{id}/metrics` returns them: `name`, and `rank`, `attempt`, `after_step`, `spread`."""
        return self.request("GET", f"/jobs/{_id(job)}/metrics", params={"name": name, **filters})

    def why(self, job) -> Why:
        return Why.from_json(self.request("GET", f"/jobs/{_id(job)}/why"))

    def wait(self, job, timeout: float | None = None, poll: float = POLL_S) -> Job:
        """The job once it has finished; MlqError (status 0) if `timeout` seconds pass first. An
        outage of the server (no connection, 502/503/504) is waited out until then."""
        deadline = None if timeout is None else time.monotonic() + timeout
        current = self.get(job)  # a server never reached (a wrong name, port, certificate) is no outage
        while True:
            if current.finished:
                return current
            if deadline is not None and time.monotonic() >= deadline:
                raise MlqError(0, WAIT_TIMED_OUT.format(job=current.id, state=current.state, timeout=timeout))
            time.sleep(poll)
            current = through_outages(self.get, job, deadline=deadline)

    def log_chunk(self, job, *, rank: int = 0, attempt: int | None = None, stderr: bool = False, offset: int = 0):
        params = {"rank": rank, "attempt": attempt, "stream": "stderr" if stderr else "stdout", "offset": offset}
        return self.request("GET", f"/jobs/{_id(job)}/logs", params=params)

    def logs(
        self,
        job,
        *,
        rank: int = 0,
        attempt: int | None = None,
        stderr: bool = False,
        follow: bool = False,
        poll: float = POLL_S,
    ) -> Iterator[str]:
        """The log's lines (of `attempt`, default the latest). `follow`: keep reading until the job has
        finished and the log has nothing more, from the server's stream (`?follow=1`, server-sent
        events), or polling from the last offset every `poll` seconds where the server does not
        stream; without an `attempt` given, each retry's new attempt is followed on from its start, in
        turn, up to the job's last (one that began and ended between two polls too)."""
        lines = self.log_lines(job, rank=rank, attempt=attempt, stderr=stderr, follow=follow, poll=poll)
        return (line for _, line in lines)

    def log_lines(
        self,
        job,
        *,
        rank: int = 0,
        attempt: int | None = None,
        stderr: bool = False,
        follow: bool = False,
        poll: float = POLL_S,
    ) -> Iterator[tuple[int | None, str]]:
        """As `logs`, each line with the attempt it belongs to: (attempt, line)."""
        pinned, offset, partial, chunk = attempt is not None, 0, "", None
        if follow:
            fallback = yield from self._streamed_logs(job, rank=rank, attempt=attempt, stderr=stderr, poll=poll)
            if fallback is None:
                return
            attempt, offset, partial, chunk = fallback
        while True:
            if chunk is None:
                read = through_outages if follow else lambda call, *args, **kwargs: call(*args, **kwargs)
                chunk = read(self.log_chunk, job, rank=rank, attempt=attempt, stderr=stderr, offset=offset)
            attempt = attempt or chunk.get("attempt")
            offset = chunk.get("next_offset", offset)
            self.log_capped = {"attempt": attempt, "chars": offset} if chunk.get("capped") else None
            *lines, partial = (partial + chunk.get("text", "")).split("\n")
            yield from ((attempt, line) for line in lines)
            if not follow:
                break
            if chunk.get("text"):
                chunk = None
                continue
            chunk = None
            current = through_outages(self.get, job)
            following = None if pinned else _attempt_after(current, rank, attempt)
            if current.finished or following:
                # one more read of this attempt: its last lines may have landed since
                where = {"rank": rank, "attempt": attempt, "stderr": stderr, "offset": offset}
                last = through_outages(self.log_chunk, job, **where)
                *lines, partial = (partial + last.get("text", "")).split("\n")
                yield from ((attempt, line) for line in lines)
                if following is None:
                    break
                if partial:
                    yield attempt, partial
                attempt, offset, partial = following, 0, ""
                continue
            time.sleep(poll)
        if partial:
            yield attempt, partial

    def _streamed_logs(self, job, *, rank: int, attempt: int | None, stderr: bool, poll: float):
        """Yields the (attempt, line)s of `?follow=1`'s events, reconnecting from the last offset when a stream
        closes before its `end`; returns None when done, or (attempt, offset, partial, chunk) to go on
        polling from where the server answered a plain chunk (one that does not stream)."""
        if not self.token:
            raise MlqError(0, self.no_token)
        pinned, offset, partial, backoff, reached = attempt is not None, 0, "", Backoff(), False
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "text/event-stream"}
        while True:
            params = {"rank": rank, "stream": "stderr" if stderr else "stdout", "offset": offset, "follow": 1}
            if attempt is not None:
                params["attempt"] = attempt
            ended = None
            try:
                with self._client().stream("GET", f"{API}/jobs/{_id(job)}/logs", params=params, headers=headers) as got:
                    if got.status_code >= 300:
                        got.read()
                        raise _refusal(got) if got.status_code >= 400 else redirected(got)
                    backoff.reset()
                    reached = True
                    if not got.headers.get("content-type", "").startswith("text/event-stream"):
                        got.read()
                        return attempt, offset, partial, json_body(got, self.server)
                    for name, data in server_sent_events(got.iter_lines()):
                        body = json.loads(data)
                        attempt = body.get("attempt", attempt)
                        if name == "log":
                            *lines, partial = (partial + body.get("text", "")).split("\n")
                            yield from ((attempt, line) for line in lines)
                            offset = body.get("next_offset", offset)
                        elif name == "end":
                            ended = body
                            break
            except httpx.HTTPError as error:  # an outage of a server reached: on from the offset once it is back
                if not reached or not isinstance(error, httpx.TransportError):  # a wrong name, port, certificate
                    raise MlqError(0, no_answer(error, server=self.server, timeout=self._timeout)) from error
                time.sleep(backoff.next())
                continue
            except MlqError as refused:
                if not is_outage(refused):
                    raise
                time.sleep(backoff.next(refused))
                continue
            if ended is None:
                time.sleep(poll)  # closed at the server's bound: on from the offset
                continue
            if partial:  # the attempt's last line, printed before any wait for the next attempt
                yield attempt, partial
            following = None if pinned else self._attempt_to_follow(job, rank=rank, attempt=attempt, poll=poll)
            if following is None:
                return None
            attempt, offset, partial = following, 0, ""

    def _attempt_to_follow(self, job, *, rank: int, attempt: int | None, poll: float) -> int | None:
        """The attempt to follow once `attempt` has ended: the next one this rank made, even when the
        job has finished since (a last attempt shorter than a poll was lost otherwise); None when the
        job finished with no attempt after it. Polls while the leader has yet to retry or finish it."""
        while True:
            current = through_outages(self.get, job)
            following = _attempt_after(current, rank, attempt)
            if following is not None or current.finished:
                return following
            time.sleep(poll)

    def cancel(self, jobs, *, reason: str = "") -> CancelResult | Job:
        """One job (-> the Job) or several (-> CancelResult, by the bulk endpoint)."""
        if isinstance(jobs, int | str | Job | QueueEntry):
            body = {"reason": reason} if reason else {}
            return Job.from_json(self.request("POST", f"/jobs/{_id(jobs)}/cancel", json=body))
        body = {"ids": [_id(job) for job in jobs], **({"reason": reason} if reason else {})}
        return CancelResult.from_json(self.request("POST", "/jobs/cancel", json=body))

    def cancel_where(self, *, reason: str = "", **filter) -> CancelResult:  # noqa: A002
        """Bulk cancel by filter: owner ("me"), state, team."""
        body = {"filter": {key: value for key, value in filter.items() if value is not None}}
        if reason:
            body["reason"] = reason
        return CancelResult.from_json(self.request("POST", "/jobs/cancel", json=body))

    def hold(self, job, *, reason: str = "") -> Job:
        """Hold a pending job: the scheduler leaves it waiting until it is released."""
        body = {"reason": reason} if reason else {}
        return Job.from_json(self.request("POST", f"/jobs/{_id(job)}/hold", json=body))

    def release(self, job) -> Job:
        """Release a held job."""
        return Job.from_json(self.request("POST", f"/jobs/{_id(job)}/release", json={}))

    def requeue(self, job, *, reason: str = "") -> Job:
        """Stop a running job gracefully and queue it again, spending none of its retries."""
        body = {"reason": reason} if reason else {}
        return Job.from_json(self.request("POST", f"/jobs/{_id(job)}/requeue", json=body))

    def set(self, job, **changes) -> Job:
        """Change what may change after submit: priority, max_runtime_hours, name."""
        body = {key: value for key, value in changes.items() if value is not None}
        return Job.from_json(self.request("PATCH", f"/jobs/{_id(job)}", json=body))

    def events(self, job) -> list[Event]:
        return [Event.from_json(row) for row in self._pages(f"/jobs/{_id(job)}/events", {})]

    # teams and quotas (nodes and maintenance windows: fleet.py)

    def team_history(self, team: str) -> list[dict]:
        """GET /teams/{name}/events, newest first: quota changes (and for members, role changes)."""
        return list(self._pages(f"/teams/{team}/events", {}))

    def usage(self, *, start=None, end=None, group_by: str = "team", csv: bool = False, **filters) -> dict | str:
        """GET /usage: GPU-hours, CPU-hours, cost, lost work, outcomes and queue waits for the
        window [start, end), grouped (docs/usage.md); filters: team, owner, resource_class,
        priority. `csv`: the CSV text instead of the JSON."""
        params = {"from": start, "to": end, "group_by": group_by, **filters, "format": "csv" if csv else None}
        return self.request("GET", "/usage", params={k: _query_value(v) for k, v in params.items()}, text=csv)

    def teams(self) -> list[Team]:
        return [Team.from_json(row) for row in self.request("GET", "/teams")]

    def quota(self, team: str) -> list[Quota]:
        return [Quota.from_json(row) for row in self.request("GET", f"/teams/{segment(team)}/quotas")]

    def set_quota(self, team: str, quotas: dict, reason: str) -> list[Quota]:
        """`quotas`: {"gpu:H100": {"guaranteed": 64}, ...}; `reason` is recorded in the audit log."""
        body = {"quotas": quotas, "reason": reason}
        return [Quota.from_json(row) for row in self.request("PATCH", f"/teams/{segment(team)}/quotas", json=body)]

    # tokens

    def deliveries(
        self, *, job: int | None = None, status: str | None = None, event: str | None = None
    ) -> list[Delivery]:
        """Your notifications' deliveries, newest first (docs/notifications.md)."""
        asked = (("job", job), ("status", status), ("event", event))
        params = {name: value for name, value in asked if value is not None}
        return [Delivery.from_json(row) for row in self._pages("/notifications/deliveries", params)]

    def notification_settings(self) -> dict:
        """Your default subscription and your webhook secret."""
        return self.request("GET", "/notifications/settings")

    def tokens(self) -> list[Token]:
        return [Token.from_json(row) for row in self.request("GET", "/tokens")]

    def create_token(self, name: str, expires_in_days: int | None = None) -> Token:
        body = {"name": name, "expires_in_days": expires_in_days}
        return Token.from_json(self.request("POST", "/tokens", json={k: v for k, v in body.items() if v is not None}))

    def revoke_token(self, token_id: int) -> None:
        self.request("DELETE", f"/tokens/{int(token_id)}")

    def login(
        self, username: str, password: str, name: str = "mlq", *, server: str | None = None, save: bool = True
    ) -> Token:
        """A new token for username and password; this client uses it from now on, and (`save`)
        the config file keeps it for the next `Client()`."""
        if server:
            self.close()
            self.server = server.rstrip("/")
        body = {"username": username, "password": password, "name": name}
        token = Token.from_json(self.request("POST", "/tokens", json=body, auth=False))
        self.close()
        self.token = token.token or ""
        self.user = username
        if save:
            write_config(self.server, self.token, username)
        return token
