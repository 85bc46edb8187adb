"""Every answer the API gives is one /api/schema/ describes: each GET operation the schema has is
called on a cluster with a variety of jobs (pending, held, waiting on a dependency or on quota,
running, being stopped, failed, an array, a sweep with metrics, a pipeline, a schedule's run), and
each answer, the writes that built the cluster included, is validated by schemathesis against the
response schema its operation documents for its status (QA found `null`s and `""`s the schema
did not allow: a generated client refuses such answers).

A GET operation this test does not call fails it: a new read endpoint gets a call here."""

import json
import re
from datetime import timedelta
from urllib.parse import urlencode

import pytest
import requests
import schemathesis
from asgiref.sync import async_to_sync
from django.utils import timezone
from schemathesis.core.failures import Failure, FailureGroup
from schemathesis.core.transport import Response
from schemathesis.openapi.checks import JsonSchemaError

from scheduling.job_metrics import do_record_metrics
from scheduling.leader.forecasting import Forecaster
from scheduling.leader.worker import run_pass
from scheduling.models import Job
from tests.conftest import make_spec
from tests.integration.test_scheduler_pass import run_all_ranks

FM = "research-foundation-models"
ONE_GPU = {"gpu_count": 1, "gpu_type": "H100"}
NO_GPU = {"gpu_count": 0, "gpu_type": None, "cpu_per_rank": 1, "memory_per_rank_gb": 4, "scratch_disk_gb": 0}


class Calls:
    """Calls the API as the demo's users and validates each answer against the schema,
    collecting what does not conform (all of it, not only the first)."""

    def __init__(self, api):
        self.clients = {name: api(name) for name in ("alice", "rita", "bob", "ops")}
        raw = self.clients["alice"].get("/api/schema/?format=json")
        assert raw.status_code == 200
        self.schema = schemathesis.openapi.from_dict(json.loads(raw.content))
        self.templates = {
            (method.upper(), path): re.compile("^" + re.sub(r"\{[^}]+\}", r"[^/]+", path) + "$")
            for path, item in self.schema.raw_schema["paths"].items()
            for method in item
            if method in ("get", "post", "put", "patch", "delete")
        }
        self.called: set[str] = set()  # GET operations answered with a documented status
        self.failures: dict[str, str] = {}  # each kind of misfit (operation, field, error) -> an answer with it

    def __call__(self, method: str, path: str, body=None, *, as_user: str = "alice", expect: int = 200, **query):
        path = path if path.endswith("/") else path + "/"
        client = self.clients[as_user]
        send = getattr(client, method.lower())
        answer = send(path, body, format="json") if body is not None else send(path, query or None)
        assert answer.status_code == expect, (method, path, query, answer.status_code, answer.content[:500])
        template = self._template(method, path)
        operation = self.schema[template][method.upper()]
        definition = operation.responses.find_by_status_code(answer.status_code)
        assert definition is not None, f"{method} {template}: status {answer.status_code} is not documented"
        if method.upper() == "GET":
            self.called.add(template)
        try:
            operation.validate_response(self._response(method, path, query, answer))
        except (Failure, FailureGroup) as found:
            for failure in found.exceptions if isinstance(found, FailureGroup) else [found]:
                example = f"{method} {path}" + (f"?{urlencode(query)}" if query else "")
                self.failures.setdefault(self._kind(method, template, failure), example)
        return answer.json() if answer.get("Content-Type", "").startswith("application/json") else answer

    @staticmethod
    def _kind(method: str, template: str, failure: Failure) -> str:
        if isinstance(failure, JsonSchemaError):  # the field, wherever in a list it is
            field = "/".join("*" if isinstance(part, int) else str(part) for part in failure.instance_path)
            return f"{method} {template} /{field}: {failure.message.splitlines()[0]}"
        return f"{method} {template}: {failure.title}: {failure.message}"

    def _template(self, method: str, path: str) -> str:
        found = [
            template
            for (verb, template), pattern in self.templates.items()
            if verb == method.upper() and pattern.match(path)
        ]
        assert found, f"{method} {path} is not in the schema"
        return min(found, key=lambda template: template.count("{"))  # /jobs/batch/ before /jobs/{job_id}/

    @staticmethod
    def _response(method: str, path: str, query: dict, answer) -> Response:
        request = requests.Request(method.upper(), f"http://testserver{path}", params=query).prepare()
        headers: dict[str, list[str]] = {}
        for name, value in answer.items():
            headers.setdefault(name.lower(), []).append(value)
        content = _read_stream(answer.streaming_content) if answer.streaming else answer.content
        return Response(
            status_code=answer.status_code, headers=headers, content=content, request=request, elapsed=0.0, verify=False
        )

    def uncalled_reads(self) -> set[str]:
        reads = {template for verb, template in self.templates if verb == "GET"}
        return reads - self.called - {path for path in reads if path.startswith("/api/v1/agents/")}


def _read_stream(content) -> bytes:
    """A streamed answer whole (a followed log streams from an async generator)."""
    if not hasattr(content, "__aiter__"):
        return b"".join(content)

    async def read() -> bytes:
        return b"".join([chunk async for chunk in content])

    return async_to_sync(read)()


def submit(call, as_user="alice", **overrides) -> Job:
    spec = make_spec(**{"client_job_id": None, "resources": ONE_GPU, "topology_hint": "none", **overrides})
    answer = call("POST", "/api/v1/jobs", spec, as_user=as_user, expect=201)
    return Job.objects.get(pk=answer["id"])


def children(parent: Job) -> list[Job]:
    return list(Job.objects.filter(parent=parent).order_by("group_index"))


def a_metric(job: Job, seq: int, **values) -> dict:
    task = job.tasks.get(rank=0)
    at = timezone.now().timestamp()
    return {
        "type": "metric",
        "job_id": job.pk,
        "rank": 0,
        "attempt": task.attempt,
        "seq": seq,
        "step": seq,
        "time": at,
        "values": values,
    }


@pytest.fixture
def call(api):
    return Calls(api)


def test_every_answer_is_one_the_schema_describes(call, leader, settings):
    settings.MLQ_SUBMIT_RATE = None  # many submits in a moment
    settings.MLQ_LOG_FOLLOW_MAX_S = 0.5  # a followed log streams until this bound
    never_retry = {"max_retries": 0, "max_restarts": 0}

    # Placed and started, then ended: a failure, a success; one running; one being stopped.
    failed = submit(call, restart_policy=never_retry, notify={"on": ["started", "failed"], "email": True})
    succeeded = submit(call, name="ok")
    running = submit(call, name="running", resources={"gpu_count": 2, "gpus_per_task": 1, "gpu_type": "H100"})
    stopping = submit(call, name="stopping")
    array = submit(call, name="shards", array={"count": 3, "parallelism": 2}, command=["echo", "{index}"])
    sweep = submit(
        call,
        name="lr-sweep",
        sweep={
            "method": "grid",
            "parameters": {"lr": [0.001, 0.01, 0.1]},
            "parallelism": 2,
            "metric": {"name": "loss", "goal": "minimize"},
        },
        command=["python", "train.py", "--lr", "{lr}"],
    )
    pipeline = submit(
        call,
        as_user="bob",
        name="nightly",
        team="production-ranking",
        checkpoint=None,
        resources=NO_GPU,
        restart_policy=never_retry,
        pipeline={
            "steps": [
                {"name": "prepare", "command": ["python", "prep.py"]},
                {"name": "train", "after": ["prepare"], "command": ["python", "train.py"]},
                {"name": "page", "after": ["train"], "when": "failure", "command": ["python", "page.py"]},
            ]
        },
    )
    run_pass(epoch=leader)
    run_all_ranks(Job.objects.get(pk=failed.pk), exit_code=1)
    run_all_ranks(Job.objects.get(pk=succeeded.pk), exit_code=0)
    run_all_ranks(Job.objects.get(pk=running.pk))
    run_all_ranks(Job.objects.get(pk=stopping.pk))
    call("POST", f"/api/v1/jobs/{stopping.pk}/cancel", {"reason": "not needed"})
    first, second = children(array)[:2]
    run_all_ranks(first, exit_code=0)
    run_all_ranks(second)
    trials = children(sweep)
    for trial in trials[:2]:
        run_all_ranks(trial)
    do_record_metrics([a_metric(trials[0], 1, loss=0.9), a_metric(trials[1], 1, loss=0.5)], now=timezone.now())
    prepare = children(pipeline)[0]
    run_all_ranks(Job.objects.get(pk=prepare.pk), exit_code=0)

    # Waiting: on quota (two 64-GPU gangs over the team's 96), held, on a dependency, a plain one.
    big = [submit(call, name=f"big-{n}", resources={"gpu_count": 64}) for n in range(2)]
    held = submit(call, name="held")
    call("POST", f"/api/v1/jobs/{held.pk}/hold", {"reason": "waiting for data"})
    dependent = submit(call, name="after-running", depends_on=[running.pk])
    run_pass(epoch=leader, forecaster=Forecaster(interval_s=0, inline=True))  # with start forecasts
    pending = submit(call, name="pending")

    # A schedule and its run; a maintenance window; a what-if preview; prices; notification settings.
    schedule = call(
        "POST",
        "/api/v1/schedules",
        {
            "name": "nightly-eval",
            "cron": "0 3 * * *",
            "timezone": "UTC",
            "spec": {"name": "eval", "team": FM, "command": ["true"]},
        },
        expect=201,
    )
    run = call("POST", f"/api/v1/schedules/{schedule['id']}/run", {}, expect=201)
    window = call(
        "POST",
        "/api/v1/maintenance",
        {
            "rack": "z2-r1",
            "starts_at": (timezone.now() + timedelta(days=1)).isoformat(),
            "duration_hours": 2,
            "reason": "PDU",
        },
        as_user="ops",
        expect=201,
    )
    today = timezone.now().date()
    preview = call(
        "POST",
        "/api/v1/what-if",
        {
            "team": FM,
            "resource_class": "gpu:H100",
            "borrowing_limit": 0,
            "from": str(today - timedelta(days=1)),
            "to": str(today + timedelta(days=1)),
        },
        as_user="rita",
        expect=202,
    )
    call("POST", "/api/v1/prices", {"resource_class": "gpu:H100", "gpu_hour": "2.5"}, as_user="ops", expect=201)
    call("PUT", "/api/v1/notifications/settings", {"on": ["failed"], "email": True})
    call("POST", "/api/v1/tokens", {"name": "ci"}, expect=201)

    # Every read, of each kind of job.
    jobs = [
        failed,
        succeeded,
        running,
        stopping,
        array,
        *children(array),
        sweep,
        *trials,
        pipeline,
        *children(pipeline),
    ]
    jobs += [*big, held, dependent, pending]
    scheduled = Job.objects.filter(schedule_id=schedule["id"]).first()
    assert scheduled is not None, run
    jobs.append(scheduled)
    for job in jobs:
        as_user = "bob" if job.team.name == "production-ranking" else "alice"
        call("GET", f"/api/v1/jobs/{job.pk}", as_user=as_user)
        call("GET", f"/api/v1/jobs/{job.pk}/why", as_user=as_user)
        call("GET", f"/api/v1/jobs/{job.pk}/events", as_user=as_user)
        call("GET", f"/api/v1/jobs/{job.pk}/metrics", as_user=as_user)
        if job.group_kind:
            call("GET", f"/api/v1/jobs/{job.pk}/children", as_user=as_user)
            call("GET", f"/api/v1/jobs/{job.pk}/logs", as_user=as_user, expect=409)
        else:
            call("GET", f"/api/v1/jobs/{job.pk}/logs", as_user=as_user)
    call("GET", f"/api/v1/jobs/{failed.pk}/logs", follow="true")  # an ended attempt: its events, then `end`
    for as_user in ("alice", "ops"):
        call("GET", "/api/v1/jobs", as_user=as_user)
        call("GET", "/api/v1/queue", as_user=as_user)
    for state in ("PENDING", "RUNNING", "FAILED", "SUCCEEDED", "CANCELLED"):
        call("GET", "/api/v1/jobs", state=state)
    call("GET", "/api/v1/jobs", team=FM, owner="me")
    call("GET", "/api/v1/jobs", parent=str(sweep.pk))
    call("GET", "/api/v1/queue", team=FM)
    call("GET", "/api/v1/scheduler")
    call("GET", "/api/v1/fair-share")
    call("GET", "/api/v1/forecast-accuracy", as_user="rita")
    node = running.tasks.first().node.name
    for as_user in ("alice", "ops"):
        call("GET", "/api/v1/nodes", as_user=as_user)
    call("GET", f"/api/v1/nodes/{node}", as_user="ops")
    call("GET", f"/api/v1/nodes/{node}/events", as_user="ops")
    call("GET", "/api/v1/teams")
    call("GET", f"/api/v1/teams/{FM}/quotas")
    call("GET", f"/api/v1/teams/{FM}/events", as_user="rita")
    call("GET", "/api/v1/usage")
    call("GET", "/api/v1/usage", group_by="team,day")
    call("GET", "/api/v1/usage", as_user="ops", group_by="owner")
    call("GET", "/api/v1/usage", group_by="resource_class,week", format="csv")
    call("GET", "/api/v1/prices")
    call("GET", "/api/v1/schedules")
    call("GET", f"/api/v1/schedules/{schedule['id']}")
    call("GET", f"/api/v1/schedules/{schedule['id']}/events")
    call("GET", "/api/v1/maintenance", as_user="ops")
    call("GET", f"/api/v1/maintenance/{window['id']}", as_user="ops")
    call("GET", f"/api/v1/maintenance/{window['id']}/events", as_user="ops")
    call("GET", f"/api/v1/what-if/{preview['id']}", as_user="rita")
    call("GET", "/api/v1/notifications/settings")
    call("GET", "/api/v1/notifications/deliveries")
    call("GET", "/api/v1/tokens")

    # The writes' answers too: a dry run (plain, an array, a schedule), a batch, changes, actions.
    call("POST", "/api/v1/jobs/dry-run", make_spec(client_job_id=None, resources=ONE_GPU))
    call(
        "POST", "/api/v1/jobs/dry-run", make_spec(client_job_id=None, resources={"gpu_count": 512}, array={"count": 2})
    )
    call("POST", "/api/v1/jobs/dry-run", make_spec(client_job_id=None, schedule={"cron": "0 4 * * *"}))
    specs = [make_spec(client_job_id=f"batch-{n}", name=f"batch-{n}", resources=ONE_GPU) for n in range(2)]
    call("POST", "/api/v1/jobs/batch", {"jobs": specs}, expect=201)
    call("PATCH", f"/api/v1/jobs/{pending.pk}", {"name": "renamed", "priority": "P2", "reason": "less urgent"})
    call("POST", f"/api/v1/jobs/{held.pk}/release", {})
    call("POST", f"/api/v1/jobs/{second.pk}/requeue", {"reason": "try again"})
    call("POST", "/api/v1/jobs/cancel", {"filter": {"owner": "me", "state": "PENDING"}})
    call(
        "PATCH",
        f"/api/v1/teams/{FM}/quotas",
        {"reason": "more", "quotas": {"gpu:H100": {"guaranteed": 33}}},
        as_user="ops",
    )
    call("PATCH", f"/api/v1/schedules/{schedule['id']}", {"suspended": True, "reason": "quiet week"})
    call("PATCH", f"/api/v1/maintenance/{window['id']}", {"reason": "PDU swap"}, as_user="ops")
    call("POST", f"/api/v1/nodes/{node}/cordon", {"reason": "firmware"}, as_user="ops")
    call("POST", "/api/v1/nodes/bulk", {"action": "uncordon", "names": [node], "reason": "done"}, as_user="ops")
    call("POST", "/api/v1/notifications/settings/rotate-secret", {})

    assert not call.uncalled_reads(), f"GET operations this test does not call: {sorted(call.uncalled_reads())}"
    assert not call.failures, "answers the schema does not describe:\n" + "\n".join(
        f"{kind}   (e.g. {example})" for kind, example in sorted(call.failures.items())
    )
