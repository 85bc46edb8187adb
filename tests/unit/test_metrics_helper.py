"""`mlqueue.report` (mlqueue/metrics_report.py), the helper a job calls: one JSON line per report
appended to $MLQ_METRICS_FILE, checked before anything is written, a no-op with one warning
outside mlqueue, and importable without Django."""

import json
import math
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

import mlqueue
from mlqueue import metrics_report
from mlqueue.metrics_report import BAD_NAME, BAD_STEP, BAD_VALUE, NO_VALUES, NOT_SET, TOO_MANY, MetricsError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def metrics_file(tmp_path, monkeypatch):
    path = tmp_path / "work" / ".mlq-metrics.jsonl"
    path.parent.mkdir()
    monkeypatch.setenv("MLQ_METRICS_FILE", str(path))
    return path


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_report_is_one_json_line_with_step_time_and_metrics(metrics_file):
    before = time.time()
    written = mlqueue.report(step=100, val_loss=0.31, acc=0.9)
    mlqueue.report({"eval/acc": 0.88, "lr": 3}, step=101)
    found = lines(metrics_file)
    assert [{k: v for k, v in line.items() if k != "time"} for line in found] == [
        {"step": 100, "metrics": {"val_loss": 0.31, "acc": 0.9}},
        {"step": 101, "metrics": {"eval/acc": 0.88, "lr": 3.0}},
    ]
    assert before <= found[0]["time"] <= found[1]["time"] <= time.time()
    assert written == found[0]
    assert metrics_file.read_text().count("\n") == 2 and metrics_file.read_text().endswith("\n")
    assert metrics_file.read_text().splitlines()[0] == json.dumps(found[0], separators=(",", ":"))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: mlqueue.report(step=-1, loss=1.0), BAD_STEP.format(value=-1)),
        (lambda: mlqueue.report(step=1.5, loss=1.0), BAD_STEP.format(value=1.5)),
        (lambda: mlqueue.report(step=True, loss=1.0), BAD_STEP.format(value=True)),
        (lambda: mlqueue.report(step=2**63, loss=1.0), BAD_STEP.format(value=2**63)),
        (lambda: mlqueue.report(step=1), NO_VALUES),
        (lambda: mlqueue.report(step=1, loss=math.nan), BAD_VALUE.format(name="loss", value=math.nan)),
        (lambda: mlqueue.report(step=1, loss=math.inf), BAD_VALUE.format(name="loss", value=math.inf)),
        (lambda: mlqueue.report(step=1, loss="0.3"), BAD_VALUE.format(name="loss", value="0.3")),
        (lambda: mlqueue.report(step=1, ok=True), BAD_VALUE.format(name="ok", value=True)),
        (lambda: mlqueue.report(step=1, big=10**400), BAD_VALUE.format(name="big", value=10**400)),
        (lambda: mlqueue.report({"val loss": 1.0}, step=1), BAD_NAME.format(name="val loss")),
        (lambda: mlqueue.report({"-x": 1.0}, step=1), BAD_NAME.format(name="-x")),
        (lambda: mlqueue.report({"a" * 101: 1.0}, step=1), BAD_NAME.format(name="a" * 101)),
        (
            lambda: mlqueue.report({f"m{i}": 1.0 for i in range(65)}, step=1),
            TOO_MANY.format(limit=64, count=65),
        ),
    ],
)
def test_a_bad_report_is_refused_with_a_clear_message_and_nothing_written(metrics_file, call, message):
    with pytest.raises(MetricsError) as raised:
        call()
    assert str(raised.value) == message
    assert not metrics_file.exists()


def test_names_take_letters_digits_and_underscore_dot_slash_dash(metrics_file):
    mlqueue.report({"eval/acc": 1, "train.loss": 2, "lr-0": 3, "_x": 4, "A" * 100: 5}, step=0)
    assert list(lines(metrics_file)[0]["metrics"]) == ["eval/acc", "train.loss", "lr-0", "_x", "A" * 100]


def test_outside_mlqueue_a_report_is_checked_then_dropped_with_one_warning(monkeypatch):
    monkeypatch.delenv("MLQ_METRICS_FILE", raising=False)
    monkeypatch.setattr(metrics_report, "_warned", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert mlqueue.report(step=1, loss=0.5) is None
        assert mlqueue.report(step=2, loss=0.4) is None
    assert [str(w.message) for w in caught] == [NOT_SET]
    assert caught[0].category is RuntimeWarning and caught[0].filename == __file__
    with pytest.raises(MetricsError):
        mlqueue.report(step=-1, loss=0.5)


def test_ranks_writing_their_own_files_never_mix(tmp_path, monkeypatch):
    for rank in (0, 1):
        monkeypatch.setenv("MLQ_METRICS_FILE", str(tmp_path / f"rank{rank}.jsonl"))
        for step in range(3):
            mlqueue.report(step=step, rank=float(rank))
    assert [line["metrics"]["rank"] for line in lines(tmp_path / "rank1.jsonl")] == [1.0, 1.0, 1.0]


def test_importing_mlqueue_and_reporting_loads_nothing_of_the_server(tmp_path):
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); import mlqueue\n"
        "mlqueue.report(step=3, loss=0.25)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'celery', 'rest_framework')))\n"
    )
    ran = subprocess.run(
        [sys.executable, "-I", "-c", script, str(ROOT)],
        env={"MLQ_METRICS_FILE": str(tmp_path / "m.jsonl")},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "[]"
    assert lines(tmp_path / "m.jsonl")[0]["metrics"] == {"loss": 0.25}
