"""How the agent reads a task's large log: a bounded amount per look, none while the outbox is
full (the rest waits on disk), none of a stream the server capped, every character whole across
its 32 KiB reads, and the task's exit queued, and reported by a heartbeat, only after its last
lines have gone."""

import sys
import time

from agents.node.daemon import QUEUED_LOG_CHARS, NodeAgent
from agents.node.runtime import LOG_READ_BYTES, TaskProcess
from tests.unit.leases import a_lease

NODE = {"name": "n1", "zone": "z1", "rack": "r1", "cpu_count": 8, "memory_gb": 16, "labels": {}}
EURO = "\u20ac"  # 3 bytes in UTF-8: the 32 KiB reads cut some in two


def writer(chars: int, *, text: str = EURO, stderr: str = "") -> list[str]:
    script = f"import sys; sys.stdout.write({text!r} * {chars}); sys.stderr.write({stderr!r})"
    return [sys.executable, "-c", script]


def exited(task: TaskProcess) -> TaskProcess:
    deadline = time.monotonic() + 20
    while not task.poll():
        assert time.monotonic() < deadline, "the task did not exit"
        time.sleep(0.05)
    return task


def text_of(events: list[dict], stream: str = "stdout") -> str:
    return "".join(e["data"] for e in events if e["stream"] == stream)


def test_a_large_log_is_read_a_bounded_amount_at_a_time_and_whole_in_the_end(tmp_path):
    chars = 1_500_000  # 4.5 MB
    job = {"job_id": 1, "rank": 0, "attempt": 1, "command": writer(chars), "env": {}}
    task = exited(TaskProcess(job, tmp_path, lease_file=a_lease(tmp_path)))
    first = task.log_events(final=True)
    assert 0 < len(text_of(first)) * 3 <= LOG_READ_BYTES and not task.logs_done
    read = [first]
    while not task.logs_done:
        read.append(task.log_events(final=True))
    assert len(read) == 5
    assert text_of([e for events in read for e in events]) == EURO * chars  # no U+FFFD where a read cut one


def test_a_capped_stream_is_read_no_further_and_the_other_still_is(tmp_path):
    job = {"job_id": 1, "rank": 0, "attempt": 1, "command": writer(100_000, stderr="warn\n"), "env": {}}
    task = exited(TaskProcess(job, tmp_path, lease_file=a_lease(tmp_path)))
    events = task.log_events(final=True, capped={"stdout"})
    assert text_of(events) == "" and text_of(events, "stderr") == "warn\n"
    assert task.logs_done


def test_the_exit_waits_for_the_last_lines_and_the_heartbeat_for_the_exit_to_have_gone(tmp_path):
    agent = NodeAgent(server="http://127.0.0.1:9", join_token="x", node=NODE, workdir=tmp_path)
    agent.renewed(time.monotonic(), 60)
    job = {"job_id": 7, "rank": 0, "attempt": 1, "epoch": 1, "image": "", "env": {}}
    task = agent.start({**job, "command": writer(4_000_000, text="a")})  # 4 MB of "a"
    exited(task)
    for _ in range(10):  # the server takes nothing: the agent stops reading at the outbox's bound
        agent.watch_tasks()
    assert QUEUED_LOG_CHARS <= agent.outbox.log_chars < QUEUED_LOG_CHARS + 2 * LOG_READ_BYTES
    assert not task.exit_queued and agent.report(task)["state"] == "running"

    shipped = []
    while not task.exit_queued:
        agent.outbox.flush(lambda batch: shipped.extend(batch) or {})
        agent.watch_tasks()
    assert agent.report(task)["state"] == "running"  # its exit is queued, not gone
    agent.outbox.flush(lambda batch: shipped.extend(batch) or {})
    assert [e["type"] for e in shipped][-1] == "exited" and text_of(shipped[1:-1]) == "a" * 4_000_000
    assert agent.report(task) == {
        "job_id": 7,
        "rank": 0,
        "attempt": 1,
        "state": "exited",
        "exit_code": 0,
        "signal": "",
        "cause": "",
    }
