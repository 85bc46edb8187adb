"""The agent's tail of a task's metrics file (agents/node/metrics.py): reports once their line is
complete, bad lines skipped and counted, reading resumed from the offset, a hostile file
refused, and a real task's `mlqueue.report` shipped as `metric` events."""

import json
import os
import sys
import time

import pytest

from agents.node import metrics
from agents.node.metrics import MetricsTail
from agents.node.runtime import install_helpers
from mlqueue.metrics_report import MAX_LINE_BYTES
from tests.unit.leases import run_task


@pytest.fixture(autouse=True)
def no_wait(monkeypatch):
    monkeypatch.setattr(metrics, "CHECK_S", 0.0)


def append(path, text: str) -> None:
    with open(path, "a") as handle:
        handle.write(text)


def line(step: int, t: float = 1000.0, **values) -> str:
    return json.dumps({"step": step, "time": t, "metrics": values}) + "\n"


def test_a_report_counts_once_its_line_is_complete(tmp_path):
    path = tmp_path / "m.jsonl"
    tail = MetricsTail(path)
    assert tail.poll() == []  # no file yet
    whole = line(1, loss=0.5)
    append(path, whole[:10])
    assert tail.poll() == []
    append(path, whole[10:] + line(2, loss=0.4)[:-1])
    assert tail.poll() == [{"seq": 1, "step": 1, "time": 1000.0, "values": {"loss": 0.5}}]
    append(path, "\n")
    assert tail.poll() == [{"seq": 2, "step": 2, "time": 1000.0, "values": {"loss": 0.4}}]
    assert tail.poll() == []
    assert tail.offset == path.stat().st_size


def test_the_last_line_counts_without_its_newline_when_the_task_has_exited(tmp_path):
    path = tmp_path / "m.jsonl"
    append(path, line(1, acc=1.0) + line(2, acc=2.0).rstrip("\n"))
    tail = MetricsTail(path)
    assert [r["step"] for r in tail.poll()] == [1]
    assert [r["step"] for r in tail.poll(final=True)] == [2]


def test_bad_lines_are_skipped_and_counted_and_keep_their_line_numbers(tmp_path):
    path = tmp_path / "m.jsonl"
    append(
        path,
        line(1, loss=1.0)
        + "not json\n"
        + "\n"  # blank: numbered, not a report, not an error
        + '{"step": -1, "metrics": {"loss": 1}}\n'
        + '{"step": 1, "metrics": {"bad name": 1}}\n'
        + '{"step": 1, "metrics": {"loss": "NaN"}}\n'
        + '{"step": 1, "metrics": {}}\n'
        + '{"step": 1, "time": -5, "metrics": {"x": 1}}\n'
        + '{"step": 1, "extra": 2, "metrics": {"x": 1}}\n'
        + "[1, 2]\n",
    )
    with open(path, "ab") as handle:
        handle.write(b"\xff\xfe\n")  # not UTF-8
    append(path, line(9, loss=0.1))
    tail = MetricsTail(path)
    found = tail.poll()
    assert [(r["seq"], r["step"]) for r in found] == [(1, 1), (12, 9)]
    assert tail.bad == 9
    # The first three go to the server (the job's timeline), the third marked the last it gets.
    assert [(bad["seq"], bad["last"]) for bad in tail.take_skipped()] == [(2, False), (4, False), (5, True)]
    assert tail.take_skipped() == []


def test_a_hand_written_line_without_time_gets_the_time_it_was_read(tmp_path):
    path = tmp_path / "m.jsonl"
    append(path, '{"step": 4, "metrics": {"eval/acc": 0.75}}\n')
    before = time.time()
    (found,) = MetricsTail(path).poll()
    assert found["values"] == {"eval/acc": 0.75} and before <= found["time"] <= time.time()


def test_an_endless_line_is_skipped_without_being_held(tmp_path):
    path = tmp_path / "m.jsonl"
    tail = MetricsTail(path)
    append(path, '{"step": 1, "metrics": {"x": ' + "1" * (MAX_LINE_BYTES + 10))
    assert tail.poll() == [] and tail.partial == b"" and tail.bad == 1
    append(path, "1" * 100 + "}}\n" + line(2, x=2.0))
    assert [(r["seq"], r["step"]) for r in tail.poll()] == [(2, 2)]
    assert tail.bad == 1


def test_reading_resumes_from_the_offset_and_line_reached(tmp_path):
    path = tmp_path / "m.jsonl"
    append(path, line(1, x=1.0) + line(2, x=2.0))
    first = MetricsTail(path)
    assert [r["seq"] for r in first.poll()] == [1, 2]
    append(path, line(3, x=3.0))
    again = MetricsTail(path, offset=first.offset, lines=first.lines)
    assert again.poll() == [{"seq": 3, "step": 3, "time": 1000.0, "values": {"x": 3.0}}]


def test_a_replaced_or_truncated_file_is_read_again_with_its_lines_numbered_on(tmp_path):
    path = tmp_path / "m.jsonl"
    append(path, line(1, x=1.0) + line(2, x=2.0))
    tail = MetricsTail(path)
    assert [r["seq"] for r in tail.poll()] == [1, 2]
    path.write_text(line(3, x=3.0))  # truncated and rewritten
    assert [(r["seq"], r["step"]) for r in tail.poll()] == [(3, 3)]
    path.unlink()
    append(path, line(4, x=4.0))  # a new file
    assert [(r["seq"], r["step"]) for r in tail.poll()] == [(4, 4)]


def test_a_link_or_fifo_is_never_read_and_never_crashes_the_agent(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text(line(1, stolen=1.0))
    path = tmp_path / "m.jsonl"
    path.symlink_to(secret)
    tail = MetricsTail(path)
    assert tail.poll() == [] and tail.poll(final=True) == []
    path.unlink()
    os.mkfifo(path)
    assert tail.poll() == []
    path.unlink()
    append(path, line(2, ok=1.0))
    assert [r["step"] for r in tail.poll()] == [2]


def test_a_file_not_owned_by_the_tasks_user_is_refused(tmp_path):
    path = tmp_path / "m.jsonl"
    append(path, line(1, x=1.0))
    assert MetricsTail(path, owner_uid=os.stat(path).st_uid + 1).poll() == []
    assert len(MetricsTail(path, owner_uid=os.stat(path).st_uid).poll()) == 1


def test_reports_past_the_line_cap_are_not_shipped(tmp_path, monkeypatch):
    monkeypatch.setattr(metrics, "MAX_REPORTS", 3)
    path = tmp_path / "m.jsonl"
    append(path, "".join(line(step, x=float(step)) for step in range(1, 6)))
    tail = MetricsTail(path)
    assert [r["seq"] for r in tail.poll()] == [1, 2, 3]
    assert (tail.shipped, tail.dropped) == (3, 2)


def test_a_task_reports_through_mlqueue_report_and_the_agent_ships_metric_events(tmp_path):
    helpers = install_helpers(tmp_path / "agent")
    script = (
        "import mlqueue\n"
        "for step in (1, 2, 3):\n"
        "    mlqueue.report(step=step, val_loss=1.0 / step)\n"
        "mlqueue.report({'eval/acc': 0.5}, step=3)\n"
    )
    task = run_task(
        {"job_id": 7, "rank": 1, "attempt": 2, "epoch": 1, "command": [sys.executable, "-S", "-c", script], "env": {}},
        tmp_path,
        helpers=helpers,
    )
    events = task.metric_events(final=True)
    logs = "".join(e["data"] for e in task.log_events(final=True))
    assert task.exit_code == 0, logs
    assert [{k: v for k, v in e.items() if k != "time"} for e in events] == [
        {"type": "metric", "job_id": 7, "rank": 1, "attempt": 2, "seq": 1, "step": 1, "values": {"val_loss": 1.0}},
        {"type": "metric", "job_id": 7, "rank": 1, "attempt": 2, "seq": 2, "step": 2, "values": {"val_loss": 0.5}},
        {
            "type": "metric",
            "job_id": 7,
            "rank": 1,
            "attempt": 2,
            "seq": 3,
            "step": 3,
            "values": {"val_loss": 1.0 / 3},
        },
        {"type": "metric", "job_id": 7, "rank": 1, "attempt": 2, "seq": 4, "step": 4 - 1, "values": {"eval/acc": 0.5}},
    ]
    assert all(abs(e["time"] - time.time()) < 30 for e in events)
    assert task.metrics.path == task.work / ".mlq-metrics.jsonl"
    task.close()
