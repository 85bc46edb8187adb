"""The outbox under a flood of log chunks: batches sized in bytes to fit the server's body limit
(never one event per request for good after a 413), a limit the server names kept, a chunk too
large alone split with its offsets true, and the chunks of a stream the server keeps no more of
dropped here instead of shipped to be thrown away."""

import json
import time

from agents.node.client import ApiError
from agents.node.outbox import DEFAULT_BODY_BYTES, Outbox
from agents.node.runtime import LOG_CHUNK_BYTES

CHUNK = "a" * LOG_CHUNK_BYTES  # what the agent reads at a time: 32 KiB


class LimitedServer:
    """Answers 413 as the server's JSON parser does for a body over `limit` bytes; keeps what it
    took, and names the streams past `cap` characters as capped."""

    def __init__(self, limit: int = DEFAULT_BODY_BYTES, cap: int | None = None):
        self.limit, self.cap = limit, cap
        self.bodies: list[int] = []  # the size of each body sent, taken or not
        self.got: list[dict] = []
        self.stored: dict[tuple, int] = {}

    def post(self, batch: list[dict]) -> dict:
        size = len(json.dumps({"events": batch}).encode())
        self.bodies.append(size)
        if size > self.limit:
            raise ApiError(413, json.dumps({"detail": f"request body is over the limit of {self.limit} bytes"}))
        self.got.extend(batch)
        capped = []
        for event in (e for e in batch if e["type"] == "log"):
            key = (event["job_id"], event["rank"], event["attempt"], event["stream"])
            self.stored[key] = self.stored.get(key, 0) + len(event["data"])
            if self.cap is not None and self.stored[key] >= self.cap and key not in capped:
                capped.append(key)
        answer = {"accepted": len(batch), "refused": []}
        if capped:
            answer["capped"] = [dict(zip(("job_id", "rank", "attempt", "stream"), key, strict=True)) for key in capped]
        return answer


def chunks(count: int, *, stream: str = "stdout", job_id: int = 1, data: str = CHUNK) -> list[dict]:
    return [
        {
            "type": "log",
            "job_id": job_id,
            "rank": 0,
            "attempt": 1,
            "stream": stream,
            "offset": n * len(data),
            "data": data,
        }
        for n in range(count)
    ]


def text_of(got: list[dict], stream: str = "stdout") -> str:
    """The stream put back together by offset, checking that no offset is claimed twice."""
    pieces = sorted((e["offset"], e["data"]) for e in got if e["type"] == "log" and e["stream"] == stream)
    text = ""
    for offset, data in pieces:
        assert offset == len(text), f"a gap or an overlap at {offset}"
        text += data
    return text


def test_a_backlog_of_chunks_goes_in_batches_that_fit_the_body_limit():
    """200 chunks of 32 KiB (6.4 MB): the old outbox sent 200 at once, got a 413 and then sent
    them one per request; now each request carries as many as fit in 256 KiB."""
    outbox, server = Outbox("n1"), LimitedServer()
    outbox.extend(chunks(200))
    assert outbox.flush(server.post) is True
    assert len(outbox) == 0 and text_of(server.got) == CHUNK * 200
    assert max(server.bodies) <= DEFAULT_BODY_BYTES  # no request refused
    assert len(server.bodies) == 29  # 7 chunks a request (7 x 32 KiB and the JSON around them)


def test_a_lower_limit_named_in_a_413_is_kept_and_batches_never_shrink_to_one_for_good():
    outbox, server = Outbox("n1"), LimitedServer(limit=100_000)
    outbox.extend(chunks(60))
    outbox.flush(server.post)
    refused = [size for size in server.bodies if size > server.limit]
    assert len(refused) == 1  # the first, at the default 256 KiB: the answer names 100,000
    assert outbox.body_bytes == 100_000
    taken = [size for size in server.bodies if size <= server.limit]
    assert text_of(server.got) == CHUNK * 60
    assert len(taken) <= 22 and min(taken[:-1]) > 60_000  # 3 chunks a request, not 1


def test_a_413_without_a_limit_halves_the_batch_and_it_grows_back():
    outbox = Outbox("n1")
    sizes, refuse = [], [True]

    def post(batch):
        sizes.append(len(batch))
        if refuse.pop(0) if refuse else False:
            raise ApiError(413, "Request Entity Too Large")  # a proxy's answer: no limit named
        return {}

    outbox.extend(chunks(40))
    outbox.flush(post)
    assert sizes[0] == 7 and sizes[1] == 3  # halved, then doubled back to the limit
    assert max(sizes[2:]) == 7 and sum(sizes[1:]) == 40


def test_a_chunk_too_large_alone_is_split_with_its_offsets_true():
    data = "é" * LOG_CHUNK_BYTES  # 6 bytes each in ASCII JSON: one chunk is 192 KiB
    outbox, server = Outbox("n1"), LimitedServer(limit=50_000)
    outbox.extend(chunks(2, data=data))
    outbox.flush(server.post)
    assert len(outbox) == 0 and text_of(server.got) == data * 2
    assert all(size <= 50_000 for size in server.bodies[1:])


def test_a_capped_stream_is_shipped_no_further_and_the_others_still_go():
    outbox, server = Outbox("n1"), LimitedServer(cap=LOG_CHUNK_BYTES * 10)
    outbox.extend(chunks(100))
    outbox.extend(chunks(3, stream="stderr"))
    outbox.extend([{"type": "exited", "job_id": 1, "rank": 0, "attempt": 1, "exit_code": 0}])
    outbox.flush(server.post)
    assert len(text_of(server.got)) < LOG_CHUNK_BYTES * 20  # not the 100 chunks: dropped once capped
    assert text_of(server.got, "stderr") == CHUNK * 3
    assert server.got[-1]["type"] == "exited"  # after every chunk sent, as before
    assert outbox.is_capped((1, 0, 1, "stdout")) and not outbox.is_capped((1, 0, 1, "stderr"))
    assert outbox.log_chars == 0


def test_a_flush_gives_way_at_its_deadline():
    outbox = Outbox("n1")

    def slow(batch):
        time.sleep(0.05)
        return {}

    outbox.extend(chunks(100))
    started = time.monotonic()
    assert outbox.flush(slow, deadline=started + 0.2) is True
    assert time.monotonic() - started < 0.5 and 0 < len(outbox) < 100
    assert outbox.log_chars == len(outbox) * LOG_CHUNK_BYTES


def test_a_cut_off_or_unreadable_answer_keeps_the_batch_for_later():
    """An answer cut off mid-body (a web pod restarting) or not JSON (a proxy's page) raised
    past the outbox and ended the shipping thread silently (found in review): the events now
    wait for the next try, and the outbox says how long the server has taken nothing."""
    import http.client

    outbox = Outbox("n1")
    outbox.extend([{"type": "started", "job_id": 1, "rank": 0, "attempt": 1}])
    for error in (http.client.IncompleteRead(b"{"), json.JSONDecodeError("bad", "<html>", 0)):

        def post(batch, error=error):
            raise error

        assert outbox.flush(post) is False
        assert len(outbox) == 1
    outbox.progress_at -= 40
    assert outbox.stalled_for() >= 40
    assert outbox.flush(LimitedServer().post) is True
    assert len(outbox) == 0 and outbox.stalled_for() == 0.0
