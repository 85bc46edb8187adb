"""A task that writes tens of MB does not hold up its node's heartbeats (the QA finding: a job
writing 30 MB kept its agent shipping log chunks one per request for 41 s without a heartbeat,
and the node was called LOST with a bystander's job on it).

A real agent (NodeAgent.run, its tasks real processes) against a small HTTP server that answers
as the agent API does: a 413 over the body limit, 50 ms a batch of events, and a stream named
`capped` once it has MLQ_MAX_LOG_CHARS. The agent heartbeats on time throughout, ships no more
of the capped stream, and reports the task's exit after its last logs."""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agents.node.daemon import QUEUED_LOG_CHARS, NodeAgent
from agents.node.outbox import DEFAULT_BODY_BYTES

INTERVAL_S = 1.0
CAP = 10_000_000  # the server's MLQ_MAX_LOG_CHARS (its default): a third of what the task writes
WATCHED_S = 6.0  # how long the heartbeats are watched: the flood and its shipping, and after
WRITTEN = 30_000_000
NODE = {"name": "n1", "zone": "z1", "rack": "r1", "cpu_count": 8, "memory_gb": 16, "labels": {}}
LINE = "a" * 100
NOISY = ["sh", "-c", f"yes {LINE} | head -c {WRITTEN}"]
BYSTANDER = [sys.executable, "-c", "import time; time.sleep(120)"]


def assignment(job_id: int, command: list[str]) -> dict:
    return {
        "job_id": job_id,
        "rank": 0,
        "attempt": 1,
        "epoch": 1,
        "command": command,
        "image": "",
        "gpu_indices": [],
        "grace_period_seconds": 1,
        "env": {},
    }


class AgentApi:
    """What the fake server saw: each heartbeat (time, tasks), each event, the chars per stream."""

    def __init__(self):
        self.lock = threading.Lock()
        self.beats: list[tuple[float, list[dict]]] = []
        self.events: list[dict] = []
        self.stored: dict[tuple, int] = {}
        self.oversized = 0
        self.pending = [assignment(1, BYSTANDER), assignment(2, NOISY)]

    def answer(self, path: str, raw: bytes) -> tuple[int, dict]:
        if path.endswith("/register"):
            return 201, {"token": "node-token", "heartbeat_interval_s": INTERVAL_S, "lease_s": 30}
        if path.endswith("/heartbeat"):
            with self.lock:
                self.beats.append((time.monotonic(), json.loads(raw)["tasks"]))
                given, self.pending = self.pending, []
            lease = {"lease_s": 30, "heartbeat_interval_s": INTERVAL_S, "highest_epoch": 1}
            return 200, {**lease, "assignments": given, "signals": [], "kill": []}
        if len(raw) > DEFAULT_BODY_BYTES:
            self.oversized += 1
            return 413, {"detail": f"request body is over the limit of {DEFAULT_BODY_BYTES} bytes"}
        time.sleep(0.05)  # a batch's inserts
        return 200, self.take(json.loads(raw)["events"])

    def take(self, events: list[dict]) -> dict:
        capped = set()
        with self.lock:
            self.events.extend(events)
            for event in (e for e in events if e["type"] == "log"):
                key = (event["job_id"], event["rank"], event["attempt"], event["stream"])
                self.stored[key] = self.stored.get(key, 0) + len(event["data"])
                if self.stored[key] >= CAP:
                    capped.add(key)
        answer = {"accepted": len(events), "refused": []}
        if capped:
            answer["capped"] = [dict(zip(("job_id", "rank", "attempt", "stream"), k, strict=True)) for k in capped]
        return answer


@pytest.fixture
def server():
    api = AgentApi()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            raw = self.rfile.read(int(self.headers["Content-Length"]))
            status, body = api.answer(self.path, raw)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # the agent's WebSocket: not here, so it heartbeats over HTTP
            self.send_error(404)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield api, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_a_task_writing_30_mb_delays_no_heartbeat_and_its_log_is_capped(server, tmp_path):
    api, url = server
    agent = NodeAgent(server=url, join_token="join", node=NODE, workdir=tmp_path)
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    exited = lambda: [e for e in api.events if e["type"] == "exited" and e["job_id"] == 2]  # noqa: E731
    reported = lambda: any(t["job_id"] == 2 and t["state"] == "exited" for _, ts in api.beats for t in ts)  # noqa: E731
    started = time.monotonic()
    while not (exited() and reported()) or time.monotonic() - started < WATCHED_S:
        assert time.monotonic() - started < 60, f"no exit reported: {len(api.events)} events, {len(api.beats)} beats"
        time.sleep(0.1)
    agent.stop()
    thread.join(timeout=20)

    times = [at for at, _ in api.beats]
    gaps = [later - earlier for earlier, later in zip(times, times[1:], strict=False)]
    assert len(times) >= WATCHED_S / INTERVAL_S - 1 and max(gaps) < 2 * INTERVAL_S, gaps  # never an interval late
    assert all(any(t["job_id"] == 1 and t["state"] == "running" for t in ts) for _, ts in api.beats[1:])

    [exit_event] = exited()
    assert exit_event["exit_code"] == 0 and exit_event["cause"] == ""
    noisy = (2, 0, 1, "stdout")
    # capped: what went past the cap is at most what was already on its way, not the 30 MB
    assert CAP <= api.stored[noisy] < CAP + QUEUED_LOG_CHARS + DEFAULT_BODY_BYTES
    assert api.oversized == 0  # every batch fit the body limit
    last_log = max(i for i, e in enumerate(api.events) if e["type"] == "log" and e["job_id"] == 2)
    assert api.events.index(exit_event) > last_log  # its exit after its last shipped lines


def test_an_agent_stopped_just_after_a_task_ended_reports_that_exit_first(server, tmp_path, monkeypatch):
    """An exit waits in the outbox behind its logs; a stop then dropped it (the shipping thread
    just ended), and at the next registration the server failed the finished task as lost, to
    run again (found in review). The agent now ships what it holds and heartbeats once more."""
    import agents.node.daemon as daemon

    api, url = server
    api.pending = [assignment(3, ["sh", "-c", "echo done"])]
    monkeypatch.setattr(daemon.NodeAgent, "ship", lambda self: None)  # nothing ships while it runs
    agent = NodeAgent(server=url, join_token="join", node=NODE, workdir=tmp_path)
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    started = time.monotonic()
    while not any(task.exit_queued for task in list(agent.tasks.values())):
        assert time.monotonic() - started < 20, "the task never ended"
        time.sleep(0.05)
    assert not api.events  # held back: a stop now would have lost it
    agent.stop()
    thread.join(timeout=20)
    assert [e["type"] for e in api.events if e["job_id"] == 3] == ["started", "log", "exited"]
    assert any(t["job_id"] == 3 and t["state"] == "exited" for t in api.beats[-1][1])
