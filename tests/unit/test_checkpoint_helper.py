"""mlqueue.checkpoint: what a job imports to confirm its checkpoints (stdlib only)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlqueue import checkpoint

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def job_env(tmp_path, monkeypatch):
    folder = tmp_path / "ckpt"
    monkeypatch.setenv("MLQ_CHECKPOINT_DIR", str(folder))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("MLQ_CHECKPOINT_INTERVAL_S", raising=False)
    monkeypatch.delenv("MLQ_CHECKPOINT_RETAIN_LAST_N", raising=False)
    monkeypatch.setattr(checkpoint, "_last_done", None)
    return folder


def test_importing_it_loads_neither_django_nor_celery():
    probe = (
        "import sys, mlqueue.checkpoint; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'celery', 'kombu', 'rest_framework')"
        " or m in ('mlqueue.celery', 'mlqueue.settings')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT)},
    )
    assert out.stdout.strip() == "[]"


def test_celery_still_finds_the_app_from_the_package_name():
    from celery.app.utils import find_app

    from mlqueue.celery import app

    assert find_app("mlqueue") is app


def test_done_writes_the_marker_atomically(job_env):
    checkpoint.done(step=1200, path="step-1200", now=1_700_000_000.5)
    assert json.loads((job_env / ".mlq-checkpoint").read_text()) == {
        "step": 1200,
        "time": 1_700_000_000.5,
        "path": "step-1200",
    }
    assert oct((job_env / ".mlq-checkpoint").stat().st_mode & 0o777) == "0o644"
    assert not [p for p in os.listdir(job_env) if p.endswith(".tmp")]


@pytest.mark.parametrize("step", [-1, 1.5, "12", True, None, 2**63, 2**70])
def test_done_refuses_a_step_that_is_not_a_non_negative_integer(job_env, step):
    with pytest.raises(checkpoint.CheckpointError, match=r"step must be an integer from 0 to 2\*\*63 - 1"):
        checkpoint.done(step=step)
    assert not (job_env / ".mlq-checkpoint").exists()


@pytest.mark.parametrize("now", [float("nan"), float("inf"), -5, True, "now", 253402300800])
def test_done_refuses_a_time_the_agent_would_skip(job_env, now):
    """The marker was written (with NaN or Infinity, not JSON) and the agent skipped it: the job
    believed a checkpoint confirmed that never was."""
    with pytest.raises(checkpoint.CheckpointError, match="now must be a time in seconds since the epoch"):
        checkpoint.done(step=1, now=now)
    assert not (job_env / ".mlq-checkpoint").exists()


def test_done_refuses_a_record_larger_than_the_agent_reads(job_env):
    with pytest.raises(checkpoint.CheckpointError, match="over the 4096 bytes the agent reads"):
        checkpoint.done(step=1, path="x" * 5000)


def test_done_without_a_checkpoint_directory_says_why(job_env, monkeypatch):
    monkeypatch.delenv("MLQ_CHECKPOINT_DIR")
    with pytest.raises(checkpoint.CheckpointError, match="MLQ_CHECKPOINT_DIR is not set"):
        checkpoint.done(step=1)


@pytest.mark.parametrize("folder", ["s3://bucket/38", "gs://ckpt/run-47/38", "file:///mnt/shared/38"])
def test_done_with_a_url_for_a_directory_says_why_and_writes_nothing(job_env, monkeypatch, tmp_path, folder):
    """QA: it wrote ./s3:/bucket/38/.mlq-checkpoint in the work directory and returned, and the
    agent (which watches no URL) never confirmed it."""
    monkeypatch.setenv("MLQ_CHECKPOINT_DIR", folder)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(checkpoint.CheckpointError) as raised:
        checkpoint.done(step=1, path="step-1")
    assert str(raised.value) == checkpoint.URL_DIRECTORY.format(folder=repr(folder))
    assert str(raised.value).startswith(f"MLQ_CHECKPOINT_DIR is a URL ({folder!r}): the node agent cannot watch it")
    assert os.listdir(tmp_path) == []
    assert checkpoint._last_done is None


def test_due_follows_the_interval_since_the_last_done(job_env, monkeypatch):
    assert checkpoint.due() is False  # no interval: the job keeps its own schedule
    monkeypatch.setenv("MLQ_CHECKPOINT_INTERVAL_S", "300")
    monkeypatch.setattr(checkpoint, "_loaded_at", 1000.0)
    assert checkpoint.due(now=1299.0) is False
    assert checkpoint.due(now=1300.0) is True
    checkpoint.done(step=5, now=1300.0)
    assert checkpoint.due(now=1599.0) is False
    assert checkpoint.due(now=1600.0) is True


def test_only_the_last_n_checkpoints_are_kept(job_env, monkeypatch):
    monkeypatch.setenv("MLQ_CHECKPOINT_RETAIN_LAST_N", "2")
    job_env.mkdir()
    for step in (1, 2, 3, 4):
        (job_env / f"step-{step}").mkdir()
        (job_env / f"step-{step}" / "weights.bin").write_bytes(b"x")
        checkpoint.done(step=step, path=str(job_env / f"step-{step}"))
    assert sorted(p.name for p in job_env.iterdir() if not p.name.startswith(".")) == ["step-3", "step-4"]


def test_pruning_never_reaches_outside_the_checkpoint_directory(job_env, monkeypatch, tmp_path):
    monkeypatch.setenv("MLQ_CHECKPOINT_RETAIN_LAST_N", "1")
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "data").write_text("keep me")
    job_env.mkdir()
    (job_env / "link").symlink_to(outside)
    (job_env / "fine").write_text("old")
    for path in (str(outside), str(job_env / "link" / "data"), "../precious", str(job_env / "link"), "fine", "last"):
        checkpoint.done(step=1, path=path)
    assert (outside / "data").read_text() == "keep me"
    assert not (job_env / "link").is_symlink()  # the link itself goes, never what it points to
    assert not (job_env / "fine").exists()
    assert (job_env / ".mlq-checkpoint").exists()


def test_a_directory_tree_is_removed_without_following_its_links(job_env, tmp_path):
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "data").write_text("keep me")
    (job_env / "old").mkdir(parents=True)
    (job_env / "old" / "escape").symlink_to(outside)
    assert checkpoint.remove_inside(str(job_env), "old") is True
    assert not (job_env / "old").exists() and (outside / "data").read_text() == "keep me"
    assert checkpoint.remove_inside(str(job_env), ".mlq-checkpoint") is False
    assert checkpoint.remove_inside(str(job_env), str(job_env)) is False
