"""A flood of log chunks on the server's side: what a stream has stored is a running total (the
cache), not a sum over every chunk at each batch; a stream at its cap is named in the answer, so
its agent stops shipping it; and the cap still falls where the stored text says, through a batch
sent twice and a cache that lost its totals."""

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling.models import TaskLog
from teams.models import AuditEvent
from tests.integration.test_agent_security import agent_settings, events, log, placed  # noqa: F401 (fixtures)

NODE = "z1-r1-h100-01"
CHUNK = "x" * 1000


def stored(job_id: int) -> int:
    return sum(len(text) for text in TaskLog.objects.filter(job_id=job_id).values_list("text", flat=True))


def capped(job_id: int) -> list[dict]:
    return [{"job_id": job_id, "rank": 0, "attempt": 1, "stream": "stdout"}]


def test_a_batch_costs_no_sum_over_the_chunks_its_stream_already_stored(placed):  # noqa: F811
    job_id, client = placed
    for start in range(0, 300, 50):  # 300 chunks stored, in batches as an agent sends them
        events(client, NODE, *(log(job_id, CHUNK, offset=n * 1000) for n in range(start, start + 50)))
    with CaptureQueriesContext(connection) as queries:
        answer = events(client, NODE, *(log(job_id, CHUNK, offset=n * 1000) for n in range(300, 308)))
    assert answer == {"accepted": 8, "refused": []}
    sums = [q["sql"] for q in queries.captured_queries if "SUM(" in q["sql"].upper()]
    assert sums == []  # the old code summed the 300 chunks' text at every batch
    assert stored(job_id) == 308_000


def test_a_stream_at_its_cap_is_named_in_the_answer_and_costs_nothing_after(settings, placed):  # noqa: F811
    settings.MLQ_MAX_LOG_CHARS = 2500
    job_id, client = placed
    assert "capped" not in events(client, NODE, log(job_id, CHUNK, offset=0))
    answer = events(client, NODE, *(log(job_id, CHUNK, offset=n * 1000) for n in (1, 2, 3)))
    assert answer == {"accepted": 3, "refused": [], "capped": capped(job_id)}
    assert stored(job_id) == 2500
    with CaptureQueriesContext(connection) as queries:
        later = events(client, NODE, log(job_id, CHUNK, offset=4000))
    assert later["capped"] == capped(job_id) and stored(job_id) == 2500
    assert not [q for q in queries.captured_queries if "SUM(" in q["sql"].upper()]
    assert AuditEvent.objects.filter(job_id=job_id, reason="LOG_CAPPED").count() == 1


def test_a_batch_sent_twice_does_not_bring_the_cap_forward(settings, placed):  # noqa: F811
    """The agent resends a batch whose answer it did not get: the second is not stored, though
    the running total counted it; the cap is checked against what is stored."""
    settings.MLQ_MAX_LOG_CHARS = 100
    job_id, client = placed
    first = log(job_id, "a" * 40, offset=0)
    events(client, NODE, first)
    events(client, NODE, first)  # counted twice: 80, of 40 stored
    answer = events(client, NODE, log(job_id, "b" * 40, offset=40), log(job_id, "c" * 40, offset=80))
    assert answer["capped"] == capped(job_id)
    texts = list(TaskLog.objects.filter(job_id=job_id).order_by("offset").values_list("text", flat=True))
    assert texts == ["a" * 40, "b" * 40, "c" * 20]


def test_a_total_the_cache_lost_is_summed_again_and_the_cap_holds(settings, placed):  # noqa: F811
    settings.MLQ_MAX_LOG_CHARS = 100
    job_id, client = placed
    events(client, NODE, log(job_id, "a" * 60, offset=0))
    cache.clear()  # Redis emptied, or the total's time up
    assert events(client, NODE, log(job_id, "b" * 60, offset=60))["capped"] == capped(job_id)
    assert stored(job_id) == 100


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_the_cap_is_per_stream(settings, placed, stream):  # noqa: F811
    settings.MLQ_MAX_LOG_CHARS = 100
    job_id, client = placed
    other = "stderr" if stream == "stdout" else "stdout"
    answer = events(
        client, NODE, {**log(job_id, "a" * 150), "stream": stream}, {**log(job_id, "b" * 50), "stream": other}
    )
    assert answer["capped"] == [{"job_id": job_id, "rank": 0, "attempt": 1, "stream": stream}]
    assert dict(TaskLog.objects.values_list("stream", "text")) == {stream: "a" * 100, other: "b" * 50}
