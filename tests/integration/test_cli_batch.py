"""`mlq submit` with several spec files or a JSON Lines file: one batch request (or a few) to
POST /api/v1/jobs/batch, a line per spec saying what became of it, against the real API."""

import json

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.core.cache import cache

from mlqueue.cli.app import EXIT_FAILED, EXIT_REFUSED
from mlqueue.cli.jobs import ONE_SPEC_ONLY
from mlqueue.client import Client, MlqError, batching
from scheduling.models import Job
from scheduling.services import SPEC_CONFLICT
from teams.models import ApiToken
from tests.integration.test_cli_groups import DjangoTransport, mlq  # noqa: F401  (the fixture)
from tests.integration.test_submit_batch import RFM, small

pytestmark = pytest.mark.django_db


def test_several_files_are_one_batch(mlq, tmp_path):  # noqa: F811
    paths = []
    for n, cid in enumerate(["a", "b", "c"]):
        path = tmp_path / (f"{cid}.yaml" if n < 2 else f"{cid}.json")
        path.write_text(yaml.safe_dump(small(cid)) if n < 2 else json.dumps(small(cid)))
        paths.append(str(path))

    result = mlq("submit", *paths, "--set", "priority=P3")

    assert result.exit_code == 0, result.output
    jobs = {job.client_job_id: job for job in Job.objects.all()}
    assert result.output.splitlines() == [
        f"{paths[i]}: submitted job {jobs[cid].pk} (llama-70b-pretrain-run-47): PENDING"
        for i, cid in enumerate(["a", "b", "c"])
    ]
    assert {job.priority for job in jobs.values()} == {"P3"}


def test_a_json_lines_file_says_what_became_of_each_spec(mlq, tmp_path):  # noqa: F811
    assert mlq("submit", *_jsonl(tmp_path, "first.jsonl", [small("a")])).exit_code == 0
    first = Job.objects.get(client_job_id="a")
    path = _jsonl(tmp_path, "runs.jsonl", [small("a"), small("b"), None, small("a", priority="P3")])

    result = mlq("submit", path[0])

    assert result.exit_code == EXIT_FAILED  # one spec was refused (409)
    b = Job.objects.get(client_job_id="b")
    assert result.output.splitlines() == [
        f"{path[0]}:1: job {first.pk} (llama-70b-pretrain-run-47) was submitted before with this spec: PENDING",
        f"{path[0]}:2: submitted job {b.pk} (llama-70b-pretrain-run-47): PENDING",
        f"{path[0]}:4: refused: {SPEC_CONFLICT.format(team=RFM, job_id=first.pk, client_job_id='a')}",
    ]
    as_json = json.loads(mlq("submit", path[0], "-o", "json").output)
    assert [(row["index"], row["status"], row["id"]) for row in as_json] == [
        (0, 200, first.pk),
        (1, 200, b.pk),
        (2, 409, first.pk),
    ]


def test_a_bad_spec_refuses_the_batch_naming_its_line(mlq, tmp_path):  # noqa: F811
    path = _jsonl(tmp_path, "runs.jsonl", [small("a"), small("b", resources={"gpu_count": 3, "gpus_per_task": 2})])
    result = mlq("submit", path[0])
    assert result.exit_code == EXIT_REFUSED
    assert f"{path[0]}:2: jobs[1].resources.gpu_count: 3 GPUs cannot be split" in result.output
    assert Job.objects.count() == 0


def test_specs_go_in_batches_and_refusals_count_among_all(mlq, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setattr(batching, "BATCH_JOBS", 2)
    path = _jsonl(tmp_path, "runs.jsonl", [small(f"j{i}") for i in range(5)])
    result = mlq("submit", path[0])
    assert result.exit_code == 0, result.output
    assert len(result.output.splitlines()) == 5 and Job.objects.count() == 5

    path = _jsonl(tmp_path, "more.jsonl", [*(small(f"k{i}") for i in range(3)), small("k3", team="no-such")])
    result = mlq("submit", path[0])
    assert result.exit_code == EXIT_REFUSED
    assert f"{path[0]}:4: jobs[3].team: no team named 'no-such'." in result.output
    # The first batch (k0, k1) went in; a rerun submits nothing twice.
    assert sorted(Job.objects.filter(client_job_id__startswith="k").values_list("client_job_id", flat=True)) == [
        "k0",
        "k1",
    ]


def test_batches_are_cut_by_the_jobs_they_make_as_the_server_bounds_them(mlq, tmp_path, settings, monkeypatch):  # noqa: F811
    """A JSON Lines file with an --array on each spec: 500 specs a batch made more jobs than
    the server takes in one, and the submit stopped half done."""
    settings.MLQ_SUBMIT_BATCH_MAX, settings.MLQ_MAX_GROUP_SIZE = 10, 10  # the server: at most 20 a batch
    monkeypatch.setattr(batching, "BATCH_MADE", 20)
    path = _jsonl(tmp_path, "runs.jsonl", [small(f"a{i}") for i in range(5)])
    result = mlq("submit", path[0], "--array", "0-5")  # 7 jobs a spec: batches of 2 specs
    assert result.exit_code == 0, result.output
    assert Job.objects.filter(parent__isnull=True).count() == 5 and Job.objects.count() == 35
    assert batching.jobs_made({"array": {"indices": "0-199%16"}}) == 201
    assert batching.jobs_made({"sweep": {"parameters": {"a": [1, 2], "b": [1, 2, 3]}}}) == 7


def test_wait_takes_one_spec(mlq, tmp_path):  # noqa: F811
    path = _jsonl(tmp_path, "runs.jsonl", [small("a")])
    result = mlq("submit", path[0], "--wait")
    assert result.exit_code == 2 and ONE_SPEC_ONLY in result.output
    assert Job.objects.count() == 0


def _jsonl(tmp_path, name: str, specs: list) -> list[str]:
    """The file, a spec per line (None: a blank line)."""
    path = tmp_path / name
    path.write_text("\n".join("" if spec is None else json.dumps(spec) for spec in specs) + "\n")
    return [str(path)]


def test_past_the_rate_a_batch_is_refused_with_when_to_retry(demo, settings):
    """The SDK waits out a 429 for up to `max_wait` seconds; with none, it says when to retry."""
    settings.MLQ_SUBMIT_RATE = "3/minute"
    cache.clear()
    try:
        _, token = ApiToken.issue(user=get_user_model().objects.get(username="alice"))
        client = Client(server="http://testserver", token=token, transport=DjangoTransport())
        assert [s.status for s in client.submit_many([small("a"), small("b")])] == [201, 201]
        with pytest.raises(MlqError) as refused:
            client.submit_many([small("c"), small("d")], max_wait=0)
        assert refused.value.status == 429 and 55 <= refused.value.retry_after <= 60  # the first two expire
        assert Job.objects.count() == 2
    finally:
        cache.clear()
