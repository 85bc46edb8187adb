"""POST /api/v1/jobs/batch: many specs in one request, each checked and idempotent as a single
submit; one bad spec refuses the batch and writes nothing (scheduling/submit_batch.py)."""

import threading
import time

import pytest
from django.core.cache import cache
from django.db import connection

from mlqueue.redis_client import redis_client
from scheduling.models import Job, JobDependency, Task
from scheduling.notify import wake_channel
from scheduling.services import NOT_A_MEMBER, P0_RESERVED, SPEC_CONFLICT, UNKNOWN_TEAM
from scheduling.submit_batch import (
    JOBS_EMPTY,
    JOBS_NOT_A_LIST,
    NO_SCHEDULES,
    NOT_AN_OBJECT,
    TOO_MANY_JOBS,
    TOO_MANY_MADE,
    UNKNOWN_BATCH_FIELD,
)
from scheduling.web.throttles import BATCH_OVER_RATE, SUBMIT_RATE_EXCEEDED
from teams.models import AuditEvent
from tests.conftest import make_spec

RFM = "research-foundation-models"


def small(cid: str | None, *, resources: dict | None = None, **overrides) -> dict:
    """A one-GPU job (the seed spec's other fields)."""
    return make_spec(client_job_id=cid, resources={"gpu_count": 1, **(resources or {})}, **overrides)


def batch(client, specs, **extra):
    return client.post("/api/v1/jobs/batch", {"jobs": specs, **extra}, format="json")


def test_a_batch_creates_each_job_with_its_tasks_and_event(api):
    response = batch(api("alice"), [small("a"), make_spec(client_job_id="b"), small(None, name="no-id")])

    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["created"], body["existing"], body["conflicts"]) == (3, 0, 0)
    jobs = {job.pk: job for job in Job.objects.all()}
    assert [(o["index"], o["status"], o["client_job_id"], o["state"], o["team"]) for o in body["jobs"]] == [
        (0, 201, "a", "PENDING", RFM),
        (1, 201, "b", "PENDING", RFM),
        (2, 201, None, "PENDING", RFM),
    ]
    assert (
        [jobs[o["id"]].name for o in body["jobs"]]
        == [o["name"] for o in body["jobs"]]
        == ["llama-70b-pretrain-run-47"] * 2 + ["no-id"]
    )
    assert [Task.objects.filter(job_id=o["id"]).count() for o in body["jobs"]] == [1, 8, 1]
    events = AuditEvent.objects.filter(kind="SUBMITTED").order_by("job_id")
    assert [(e.job_id, e.actor_name, e.message) for e in events] == [
        (body["jobs"][0]["id"], "alice", f"submitted by alice to {RFM}: 1 x 1 H100, priority P1"),
        (body["jobs"][1]["id"], "alice", f"submitted by alice to {RFM}: 8 x 8 H100, priority P1"),
        (body["jobs"][2]["id"], "alice", f"submitted by alice to {RFM}: 1 x 1 H100, priority P1"),
    ]


def test_a_batch_job_is_the_same_job_as_a_single_submit(api):
    """The same spec through either door: a resubmit through the other answers 200 with it."""
    client = api("alice")
    single = client.post("/api/v1/jobs", small("s"), format="json").json()
    answer = batch(client, [small("s"), small("t")]).json()
    assert [(o["status"], o["id"]) for o in answer["jobs"]][0] == (200, single["id"])
    again = client.post("/api/v1/jobs", small("t"), format="json")
    assert (again.status_code, again.json()["id"]) == (200, answer["jobs"][1]["id"])
    stored = Job.objects.get(pk=answer["jobs"][1]["id"])
    assert stored.spec == Job.objects.get(pk=single["id"]).spec | {"client_job_id": "t"}


def test_a_mixed_batch_answers_201_200_and_409_per_spec(api):
    client = api("alice")
    before_a = client.post("/api/v1/jobs", small("a"), format="json").json()
    before_b = client.post("/api/v1/jobs", small("b"), format="json").json()
    specs = [
        small("a"),  # 200: the same spec again
        small("b", priority="P3"),  # 409: another spec under b
        small("c"),  # 201
        small("c"),  # 200: c again, earlier in this batch
        small("c", priority="P3"),  # 409: another spec under c, earlier in this batch
        small(None),  # 201: no id, always new
    ]
    response = batch(client, specs)

    assert response.status_code == 201
    body = response.json()
    outcomes = body["jobs"]
    assert [o["status"] for o in outcomes] == [200, 409, 201, 200, 409, 201]
    assert (body["created"], body["existing"], body["conflicts"]) == (2, 2, 2)
    assert outcomes[0]["id"] == before_a["id"]
    assert outcomes[1] == {
        "index": 1,
        "status": 409,
        "id": before_b["id"],
        "client_job_id": "b",
        "detail": SPEC_CONFLICT.format(team=RFM, job_id=before_b["id"], client_job_id="b"),
    }
    assert outcomes[3]["id"] == outcomes[4]["id"] == outcomes[2]["id"]
    assert outcomes[4]["detail"] == SPEC_CONFLICT.format(team=RFM, job_id=outcomes[2]["id"], client_job_id="c")
    assert Job.objects.count() == 4 and AuditEvent.objects.filter(kind="SUBMITTED").count() == 4


def test_a_batch_of_resubmits_only_is_200(api):
    client = api("alice")
    batch(client, [small("a"), small("b")])
    response = batch(client, [small("b"), small("a")])
    assert response.status_code == 200
    assert [o["status"] for o in response.json()["jobs"]] == [200, 200]
    assert Job.objects.count() == 2


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({"jobs": []}, {"jobs": [JOBS_EMPTY]}),
        ({"jobs": {"a": 1}}, {"jobs": [JOBS_NOT_A_LIST]}),
        ({}, {"jobs": [JOBS_NOT_A_LIST]}),
        ([small("a")], {"body": [NOT_AN_OBJECT]}),
        ({"jobs": [small("a")], "team": RFM}, {"team": [UNKNOWN_BATCH_FIELD]}),
    ],
)
def test_a_malformed_batch_is_400_naming_the_field(api, body, fields):
    response = api("alice").post("/api/v1/jobs/batch", body, format="json")
    assert response.status_code == 400
    assert response.json()["fields"] == fields
    assert Job.objects.count() == 0


def test_a_batch_is_bounded_by_the_jobs_it_makes_children_included(api, settings):
    """Five arrays of 10,000 in one batch made 50,005 jobs in one 96-second transaction."""
    settings.MLQ_SUBMIT_BATCH_MAX, settings.MLQ_MAX_GROUP_SIZE = 3, 10
    arrays = [small(f"a{i}", array={"count": 6}) for i in range(2)]  # 14 jobs, over 3 + 10
    response = batch(api("alice"), arrays)
    assert response.status_code == 400
    assert response.json()["fields"] == {"jobs": [TOO_MANY_MADE.format(limit=13, count=14)]}
    assert Job.objects.count() == 0
    sweep = {"method": "grid", "parameters": {"lr": [1, 2, 3]}}  # 4 jobs with the array's 7 and a plain one
    response = batch(api("alice"), [arrays[0], small("s", sweep=sweep), small("p")])
    assert response.status_code == 201, response.json()
    assert Job.objects.count() == 12


def test_more_than_the_limit_is_400_naming_jobs(api, settings):
    settings.MLQ_SUBMIT_BATCH_MAX = 3
    response = batch(api("alice"), [small(f"j{i}") for i in range(4)])
    assert response.status_code == 400
    assert response.json()["fields"] == {"jobs": [TOO_MANY_JOBS.format(limit=3, count=4)]}
    assert Job.objects.count() == 0


def test_bad_specs_refuse_the_batch_and_each_is_named_by_index(api):
    specs = [
        small("ok-0"),
        small("ok-1"),
        small("bad-2", resources={"gpu_count": 3, "gpus_per_task": 2}),
        small("ok-3"),
        {**small("bad-4"), "gpu_cont": 1},
        small("bad-5", team="no-such-team"),
        "not a spec",
        {**small("bad-7"), "schedule": {"cron": "0 3 * * *"}},
        small("bad-8", resources={"gpu_count": 9999}),
    ]
    response = batch(api("alice"), specs)

    assert response.status_code == 400
    fields = response.json()["fields"]
    assert sorted(fields) == [
        "jobs[2].resources.gpu_count",
        "jobs[4].gpu_cont",
        "jobs[5].team",
        "jobs[6]",
        "jobs[7].schedule",
        "jobs[8].resources.gpu_count",
    ]
    assert fields["jobs[2].resources.gpu_count"] == ["3 GPUs cannot be split into tasks of 2 (gpus_per_task)."]
    assert fields["jobs[5].team"] == [UNKNOWN_TEAM.format(name="no-such-team")]
    assert fields["jobs[7].schedule"] == [NO_SCHEDULES]
    assert response.json()["detail"].startswith("jobs[2].resources.gpu_count: ")
    assert Job.objects.count() == Task.objects.count() == AuditEvent.objects.count() == 0


def test_each_spec_is_checked_against_its_own_team(api):
    """alice is in research-foundation-models, not in production-ranking: a 403 naming the spec."""
    specs = [small("mine"), small("theirs", team="production-ranking"), small("p0", priority="P0")]
    response = batch(api("alice"), specs)

    assert response.status_code == 403
    assert response.json() == {
        "detail": f"jobs[1].team: {NOT_A_MEMBER.format(name='production-ranking')}",
        "fields": {
            "jobs[1].team": [NOT_A_MEMBER.format(name="production-ranking")],
            "jobs[2].priority": [P0_RESERVED.format(name=RFM)],
        },
    }
    assert Job.objects.count() == 0
    # The team's lead may submit at P0; an admin to any team.
    assert batch(api("rita"), [small("p0", priority="P0")]).status_code == 201
    assert batch(api("ops"), [small("rfm"), small("pr", team="production-ranking")]).status_code == 201


def test_dependencies_are_checked_per_spec(api):
    client = api("alice")
    prep = client.post("/api/v1/jobs", small("prep"), format="json").json()
    theirs = api("bob").post("/api/v1/jobs", small("x", team="production-ranking"), format="json").json()
    refused = batch(client, [small("a", depends_on=[prep["id"]]), small("b", depends_on=[prep["id"], theirs["id"]])])
    assert refused.status_code == 400
    assert refused.json()["fields"] == {
        "jobs[1].depends_on.1": [f"job {theirs['id']} does not exist or is not visible to you."]
    }

    answer = batch(
        client, [small("a", depends_on=[prep["id"]]), small("b", depends_on=[{"job": prep["id"], "on": "any"}])]
    )
    assert answer.status_code == 201
    edges = JobDependency.objects.order_by("from_job_id").values_list("from_job_id", "to_job_id", "condition")
    assert list(edges) == [
        (answer.json()["jobs"][0]["id"], prep["id"], "success"),
        (answer.json()["jobs"][1]["id"], prep["id"], "any"),
    ]


def test_secrets_in_a_batch_are_stored_masked(api):
    answer = batch(api("alice"), [small("s", secret_env={"WANDB_API_KEY": "k-1"})]).json()
    job = Job.objects.get(pk=answer["jobs"][0]["id"])
    assert job.spec["secret_env"] == {"WANDB_API_KEY": "***"}
    assert job.secret_env_ciphertext and "k-1" not in job.secret_env_ciphertext
    again = batch(api("alice"), [small("s", secret_env={"WANDB_API_KEY": "k-1"})]).json()
    other = batch(api("alice"), [small("s", secret_env={"WANDB_API_KEY": "k-2"})]).json()
    assert (again["jobs"][0]["status"], other["jobs"][0]["status"]) == (200, 409)


def test_an_array_in_a_batch_creates_its_children(api):
    spec = small("arr", array={"count": 5, "parallelism": 2})
    answer = batch(api("alice"), [spec, small("plain")]).json()
    parent = Job.objects.get(pk=answer["jobs"][0]["id"])
    assert parent.group_kind == "array"
    assert Job.objects.filter(parent=parent).count() == 5
    event = AuditEvent.objects.get(job=parent, kind="SUBMITTED")
    assert event.message == f"submitted by alice to {RFM}: array of 5 (at most 2 at once), each 1 x 1 H100, priority P1"
    assert event.data["children"] == 5


def test_a_batch_is_a_fixed_number_of_queries(api, django_assert_num_queries):
    """Whatever its size: the team, the memberships, the inventory, which ids exist; then the
    jobs, their tasks and their events, one INSERT each (in a savepoint here)."""
    client = api("alice")
    client.get("/api/v1/teams")  # the token is now remembered
    for size in (2, 40):
        with django_assert_num_queries(9):
            response = batch(client, [small(f"q{size}-{i}") for i in range(size)])
        assert response.status_code == 201 and response.json()["created"] == size


def test_a_batch_wakes_the_scheduler_once(api, django_capture_on_commit_callbacks):
    pubsub = redis_client().pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(wake_channel())
    try:
        with django_capture_on_commit_callbacks(execute=True):
            assert batch(api("alice"), [small(f"w{i}") for i in range(5)]).status_code == 201
        messages, deadline = [], time.monotonic() + 2
        while time.monotonic() < deadline:
            message = pubsub.get_message(timeout=0.1)
            if message:
                messages.append(message["data"])
    finally:
        pubsub.close()
    assert messages == [b"submit"]


def test_the_wake_up_channel_is_the_redis_databases_own(settings):
    """Publish/subscribe spans a Redis server's databases: the channel's name keeps a cluster's
    wake-ups (a submit on one test worker, a fleet coming back on another) to its own leader."""
    assert wake_channel().endswith(f":{redis_client().connection_pool.connection_kwargs['db']}")
    settings.REDIS_URL = "redis://127.0.0.1:6379/5"
    assert wake_channel() == "mlqueue:scheduler:wake:5"
    settings.REDIS_URL = "redis://127.0.0.1:6379"
    assert wake_channel() == "mlqueue:scheduler:wake:0"


def test_the_throttle_counts_jobs_not_requests(api, settings):
    settings.MLQ_SUBMIT_RATE = "5/minute"
    cache.clear()
    try:
        client = api("alice")
        assert batch(client, [small(f"a{i}") for i in range(3)]).status_code == 201
        refused = batch(client, [small(f"b{i}") for i in range(3)])  # 3 + 3 > 5
        assert refused.status_code == 429
        assert refused.json()["detail"] == SUBMIT_RATE_EXCEEDED.format(
            count=5, period="minute", wait=refused["Retry-After"]
        )
        assert client.post("/api/v1/jobs", small("c"), format="json").status_code == 201  # the 4th job
        assert batch(client, [small("d0"), small("d1")]).status_code == 429  # 4 + 2 > 5
        assert batch(client, [small("d0")]).status_code == 201
        too_big = batch(client, [small(f"e{i}") for i in range(6)])
        assert too_big.status_code == 400
        assert too_big.json()["fields"] == {"jobs": [BATCH_OVER_RATE.format(jobs=6, count=5, period="minute")]}
        assert Job.objects.count() == 5
    finally:
        cache.clear()


@pytest.mark.django_db(transaction=True)
def test_racing_batches_and_submits_make_one_job_per_id(api):
    """Two batches of the same 30 ids and single submits of some of them, all at once: each id
    is one job, created by exactly one of them, and every other answer is 200 with that job."""
    ids = [f"r{i}" for i in range(30)]
    clients = [api("alice") for _ in range(5)]
    barrier = threading.Barrier(len(clients))
    answers: list[tuple[str, int, int]] = []

    def send(client, kind):
        try:
            barrier.wait()
            if kind == "batch":
                body = batch(client, [small(cid) for cid in ids]).json()
                answers.extend((o["client_job_id"], o["status"], o["id"]) for o in body["jobs"])
            else:
                for cid in ids[kind::3]:
                    response = client.post("/api/v1/jobs", small(cid), format="json")
                    answers.append((cid, response.status_code, response.json()["id"]))
        finally:
            connection.close()

    threads = [
        threading.Thread(target=send, args=(c, k)) for c, k in zip(clients, ["batch", "batch", 0, 1, 2], strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert len(answers) == 90
    for cid in ids:
        replies = [(status, job_id) for c, status, job_id in answers if c == cid]
        assert sorted(status for status, _ in replies) == [200, 200, 201], cid
        assert len({job_id for _, job_id in replies}) == 1, cid
    assert Job.objects.count() == Task.objects.count() == AuditEvent.objects.filter(kind="SUBMITTED").count() == 30


@pytest.mark.parametrize(
    ("item", "field"),
    [
        (None, "jobs[0]"),
        ([], "jobs[0]"),
        ("spec", "jobs[0]"),
        ({}, "jobs[0].team"),
        ({"team": 5, "command": ["x"]}, "jobs[0].team"),
        ({**small("s"), "schedule": "0 3 * * *"}, "jobs[0].schedule"),
        ({**small("s"), "schedule": None}, "jobs[0].schedule"),
        (small("s", depends_on=[2**63]), "jobs[0].depends_on.0"),
        (small("two words"), "jobs[0].client_job_id"),
    ],
)
def test_a_hostile_spec_is_400_naming_it(api, item, field):
    response = batch(api("alice"), [item, small("fine")])
    assert response.status_code == 400, response.json()
    assert field in response.json()["fields"], response.json()
    assert Job.objects.count() == 0
