"""Followed logs (`GET /api/v1/jobs/{id}/logs?follow=1`) against a real web process (daphne, with
its connection pool of MLQ_DB_POOL_MAX): more open streams than the pool has connections, and
the web still answers everything else, because a stream takes a connection only for each poll."""

import sys
import threading
import time

import httpx
import pytest

from scheduling.models import Node
from tests.e2e.cluster import Cluster
from tests.e2e.processes import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

NODE = {"name": "z1-r1-h100-01", "zone": "z1", "rack": "z1-r1"}
POOL = 4
STREAMS = 3 * POOL


@pytest.fixture
def cluster(tmp_path, demo):
    running = Cluster(tmp_path, MLQ_DB_POOL_MAX=str(POOL))
    yield running
    running.stop()


def test_more_streams_than_pooled_connections_leave_the_web_answering(cluster, api):
    cluster.start(agents=[NODE])
    wait_for(lambda: Node.objects.filter(state="READY").count() == 1, timeout=20, what="a READY node")
    token = api("alice")._credentials["HTTP_AUTHORIZATION"]
    web = httpx.Client(base_url=cluster.url, headers={"Authorization": token}, timeout=10)
    spec = {
        "team": "research-foundation-models",
        "name": "talks-then-waits",
        "command": [sys.executable, "-c", "import time; print('hello', flush=True); time.sleep(120)"],
        "resources": {"gpu_count": 4, "gpu_type": "H100"},
    }
    job_id = web.post("/api/v1/jobs", json=spec).json()["id"]
    wait_for(lambda: web.get(f"/api/v1/jobs/{job_id}/logs").json()["text"], timeout=30, what="the first line")

    received: list[list[str]] = [[] for _ in range(STREAMS)]

    def follow(index: int) -> None:
        headers = {"Authorization": token, "Accept": "text/event-stream"}
        with httpx.stream(
            "GET", f"{cluster.url}/api/v1/jobs/{job_id}/logs?follow=1", headers=headers, timeout=60
        ) as stream:
            for line in stream.iter_lines():
                if line.startswith("event: "):
                    received[index].append(line.removeprefix("event: "))
                    if line == "event: end":
                        return

    threads = [threading.Thread(target=follow, args=(index,), daemon=True) for index in range(STREAMS)]
    for thread in threads:
        thread.start()
    wait_for(lambda: all(events == ["log"] for events in received), timeout=20, what="every stream's first line")

    started = time.monotonic()
    for _ in range(POOL):
        assert web.get(f"/api/v1/jobs/{job_id}").status_code == 200
    assert time.monotonic() - started < 5, "a request waited for a connection the streams held"

    assert web.post(f"/api/v1/jobs/{job_id}/cancel", json={}).status_code == 200
    for thread in threads:
        thread.join(timeout=30)
    assert all(events == ["log", "end"] for events in received), received  # each ended with the job
    web.close()
