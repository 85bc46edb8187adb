"""`mlq` for job groups (issue 16) against the real API (the Django app in process: httpx's
requests handed to Django's test client) and a leader's passes: `submit --array` makes the array the server expects,
`jobs` lists the group as one row, `status` and `children` show its elements, and `cancel` says
how many children it cancelled and how many are still stopping."""

import json

import httpx
import pytest
import yaml
from click.testing import CliRunner
from django.contrib.auth import get_user_model
from django.test import Client as DjangoClient

from mlqueue import cli
from mlqueue.cli.app import EXIT_REFUSED
from mlqueue.client import Client
from scheduling.leader.worker import run_pass
from scheduling.models import Job
from teams.models import ApiToken
from tests.conftest import make_spec

pytestmark = pytest.mark.django_db


class DjangoTransport(httpx.BaseTransport):
    """httpx's requests answered by the Django app through its test client: the test's own
    database connection and transaction, no server process."""

    def __init__(self):
        self.django = DjangoClient()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        headers = {
            key: value for key, value in request.headers.items() if key.lower() not in ("host", "content-length")
        }
        answer = self.django.generic(
            request.method,
            f"{request.url.path}?{request.url.query.decode()}",
            data=request.read(),
            content_type=request.headers.get("content-type", ""),
            headers=headers,
        )
        return httpx.Response(answer.status_code, headers=dict(answer.headers), content=answer.content)


@pytest.fixture
def mlq(demo, monkeypatch, tmp_path):
    """mlq(*args) -> click's result of running mlq as alice against this process's API."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    _, token = ApiToken.issue(user=get_user_model().objects.get(username="alice"))
    transport = DjangoTransport()

    def run(*args):
        def build():
            return Client(server="http://testserver", token=token, transport=transport)

        return CliRunner().invoke(cli.main, list(args), obj={"client": build}, catch_exceptions=False)

    return run


@pytest.fixture
def spec_file(tmp_path):
    spec = make_spec(
        client_job_id=None,
        name="shards",
        command=["python", "infer.py", "--shard", "{index}"],
        resources={"gpu_count": 1, "gpu_type": "H100"},
        topology_hint="none",
    )
    path = tmp_path / "shards.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def test_an_array_from_submit_to_cancel(mlq, leader, spec_file):
    submitted = mlq("submit", spec_file, "--array", "0-4%2", "--max-failures", "1", "-o", "json")
    assert submitted.exit_code == 0, submitted.output
    parent = Job.objects.get(pk=json.loads(submitted.stdout)["id"])
    assert parent.group == {**parent.group, "count": 5, "indices": "0-4", "parallelism": 2, "max_failures": 1}
    kids = list(Job.objects.filter(parent=parent).order_by("group_index"))
    assert [kid.command[-1] for kid in kids] == ["0", "1", "2", "3", "4"]

    run_pass(epoch=leader)
    listed = json.loads(mlq("jobs", "-o", "json").stdout)
    assert [(row["id"], row["group"]["running"], row["group"]["pending"]) for row in listed] == [(parent.pk, 2, 3)]
    assert len(json.loads(mlq("jobs", "--children", "-o", "json").stdout)) == 6

    status = mlq("status", str(parent.pk))
    lines = [line.split() for line in status.stdout.splitlines()]
    assert " ".join(lines[3]) == "array of 5 elements, at most 2 at once, 1 may fail: 2 running, 3 pending"
    assert [row[:3] for row in lines[5:]] == [
        ["INDEX", "ID", "STATE"],
        ["0", str(kids[0].pk), "ASSIGNED"],
        ["1", str(kids[1].pk), "ASSIGNED"],
        ["2", str(kids[2].pk), "PENDING"],
        ["3", str(kids[3].pk), "PENDING"],
        ["4", str(kids[4].pk), "PENDING"],
    ]
    children = json.loads(mlq("children", str(parent.pk), "-o", "json").stdout)
    assert [(row["array_index"], row["parent"]) for row in children] == [(index, parent.pk) for index in range(5)]

    cancelled = mlq("cancel", str(parent.pk))
    assert cancelled.exit_code == 0, cancelled.output
    assert cancelled.stdout.strip() == (
        f"job {parent.pk} (array): cancelled 3 of its 5 elements; 2 stopping on their nodes; RUNNING"
    )
    assert sorted(Job.objects.filter(parent=parent).values_list("state", flat=True)) == [
        "ASSIGNED",
        "ASSIGNED",
        "CANCELLED",
        "CANCELLED",
        "CANCELLED",
    ]


def test_the_servers_refusal_of_an_array_too_large_is_a_clean_message(mlq, leader, spec_file, settings):
    settings.MLQ_MAX_GROUP_SIZE = 100
    refused = mlq("submit", spec_file, "--array", "0-199%16")
    assert refused.exit_code == EXIT_REFUSED
    assert "at most 100 elements in one group, got 200." in refused.stderr
    assert not Job.objects.filter(name="shards").exists()
