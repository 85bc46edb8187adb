"""The agent's watch of a task's checkpoint marker: the file is the job's (hostile), the agent
is root. Only a plain, small, well-formed file written after the task started is reported."""

import json
import os
import sys
import time
from pathlib import Path

import pytest

from agents.node import checkpoints
from agents.node.checkpoints import CheckpointWatch, marker_path, read_marker
from agents.node.runtime import TaskProcess, install_helpers
from tests.unit.leases import a_lease, run_task


def marker(folder, text: str):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / ".mlq-checkpoint"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "text, record",
    [
        ('{"step": 1200, "time": 1700000000.25}', {"step": 1200, "at": 1700000000.25}),
        ('{"step": 0, "time": 1700000000, "path": "s3://b/k"}', {"step": 0, "at": 1700000000.0}),
    ],
)
def test_well_formed_markers(tmp_path, text, record):
    assert read_marker(marker(tmp_path, text)) == (record, "")


@pytest.mark.parametrize(
    "text, why",
    [
        ("\x00\xff garbage {", "not JSON"),
        ('["step", 1]', "not a JSON object"),
        ('{"step": -1, "time": 1}', "`step` is not a non-negative integer"),
        ('{"step": "12", "time": 1}', "`step` is not a non-negative integer"),
        ('{"step": true, "time": 1}', "`step` is not a non-negative integer"),
        ('{"step": 1e3, "time": 1}', "`step` is not a non-negative integer"),
        ('{"step": 99999999999999999999999, "time": 1}', "`step` is not a non-negative integer"),
        ('{"step": 1, "time": NaN}', "`time` is not a time in seconds since the epoch"),
        ('{"step": 1, "time": 1e300}', "`time` is not a time in seconds since the epoch"),
        ('{"step": 1}', "`time` is not a time in seconds since the epoch"),
        ("[" * 100_000, "more than the 4096 bytes allowed"),
    ],
)
def test_bad_markers_are_refused_with_a_reason(tmp_path, text, why):
    found, reason = read_marker(marker(tmp_path, text))
    assert found is None and why in reason


def test_a_link_to_a_secret_is_not_followed(tmp_path):
    tmp_path.joinpath(".mlq-checkpoint").symlink_to("/etc/shadow")
    assert read_marker(tmp_path / ".mlq-checkpoint") == (None, "not a plain file (a link, FIFO, device or directory)")


def test_a_100_mb_file_is_not_read(tmp_path):
    path = tmp_path / ".mlq-checkpoint"
    with open(path, "wb") as handle:
        handle.truncate(100 * 1024 * 1024)
    assert read_marker(path) == (None, f"{100 * 1024 * 1024} bytes, more than the 4096 bytes allowed")


def test_a_fifo_does_not_block_the_agent(tmp_path):
    os.mkfifo(tmp_path / ".mlq-checkpoint")
    started = time.monotonic()
    assert read_marker(tmp_path / ".mlq-checkpoint")[0] is None
    assert time.monotonic() - started < 1.0


def test_a_directory_or_nothing_is_no_checkpoint(tmp_path):
    (tmp_path / ".mlq-checkpoint").mkdir()
    assert read_marker(tmp_path / ".mlq-checkpoint")[0] is None
    assert read_marker(tmp_path / "missing" / ".mlq-checkpoint")[0] is None


def test_where_the_marker_lies(tmp_path):
    assert str(marker_path("/data/ckpt", tmp_path)) == "/data/ckpt/.mlq-checkpoint"
    assert marker_path("ckpt", tmp_path) == tmp_path / "ckpt" / ".mlq-checkpoint"  # as the task sees it: its cwd
    assert marker_path("s3://bucket/run", tmp_path) is None
    assert marker_path("", tmp_path) is None


def test_the_watch_reports_each_new_version_once_and_ignores_what_was_there_before(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoints, "CHECK_S", 0.0)
    path = marker(tmp_path, '{"step": 7, "time": 1}')  # an earlier attempt's
    watch = CheckpointWatch(path)
    assert watch.poll() is None
    marker(tmp_path / "x", "")  # unrelated
    new = tmp_path / ".tmp"
    new.write_text('{"step": 8, "time": 2}')
    os.replace(new, path)
    assert watch.poll() == {"step": 8, "at": 2.0}
    assert watch.poll() is None
    path.write_text("not json at all")
    assert watch.poll() is None and watch.poll() is None  # refused once, not re-read every loop
    path.unlink()
    path.symlink_to("/etc/shadow")
    assert watch.poll() is None


def test_the_watch_is_cheap_between_checks(tmp_path):
    path = marker(tmp_path, "")
    watch = CheckpointWatch(path)
    watch.poll()
    path.write_text('{"step": 8, "time": 2}')
    assert watch.poll() is None  # within CHECK_S of the last look: not even a stat
    assert watch.poll(force=True) == {"step": 8, "at": 2.0}  # the task exited: one last look


def test_a_task_confirms_through_mlqueue_checkpoint_and_the_agent_reports_it(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoints, "CHECK_S", 0.0)
    folder = tmp_path / "shared-ckpt"
    marker(folder, '{"step": 1, "time": 1}')  # left by attempt 1
    helpers = install_helpers(tmp_path / "agent")
    assert sorted(p.name for p in (helpers / "mlqueue").iterdir()) == [
        "__init__.py",
        "checkpoint.py",
        "metrics_report.py",
    ]
    script = (
        "import sys; from mlqueue import checkpoint; checkpoint.done(step=42); "
        "print(sorted(m for m in sys.modules if m.startswith(('django', 'celery'))))"
    )
    task = run_task(
        {
            "job_id": 5,
            "rank": 1,
            "attempt": 2,
            "epoch": 3,
            "command": [sys.executable, "-c", script],
            "env": {"MLQ_CHECKPOINT_DIR": str(folder)},
        },
        tmp_path,
        helpers=helpers,
    )
    events = task.checkpoint_events(final=True)
    logs = "".join(e["data"] for e in task.log_events(final=True))
    assert task.exit_code == 0, logs
    assert [{k: v for k, v in e.items() if k != "at"} for e in events] == [
        {"type": "checkpoint", "job_id": 5, "rank": 1, "attempt": 2, "epoch": 3, "step": 42}
    ]
    assert abs(events[0]["at"] - time.time()) < 30
    assert json.loads((folder / ".mlq-checkpoint").read_text())["step"] == 42
    assert "[]" in logs


@pytest.mark.skipif(not (hasattr(os, "geteuid") and os.geteuid() == 0), reason="switching users needs root")
def test_a_task_with_a_user_of_its_own_can_import_the_helper_but_not_change_it(monkeypatch):
    import shutil
    import tempfile

    from agents.node.isolation import TaskUsers

    monkeypatch.setattr(checkpoints, "CHECK_S", 0.0)
    root = tempfile.mkdtemp(prefix="mlq-ckpt-", dir="/tmp")
    try:
        os.chmod(root, 0o711)
        folder = os.path.join(root, "ckpt")
        os.mkdir(folder)
        os.chmod(folder, 0o777)
        helpers = install_helpers(Path(root) / "agent")
        os.chmod(helpers.parent, 0o711)
        users = TaskUsers(uids=range(200800, 200801))
        user = users.acquire("bob")
        script = (
            "from mlqueue import checkpoint; checkpoint.done(step=3)\n"
            "try:\n    open(checkpoint.__file__, 'a')\nexcept PermissionError:\n    print('read-only')\n"
        )
        task = TaskProcess(
            {
                "job_id": 5,
                "rank": 0,
                "attempt": 1,
                "epoch": 1,
                "command": ["/usr/bin/python3", "-S", "-c", script],
                "env": {"MLQ_CHECKPOINT_DIR": folder},
            },
            helpers.parent / "node",
            user=user,
            lease_file=a_lease(helpers.parent),
            helpers=helpers,
        )
        task.process.wait(timeout=20)
        task.poll()
        assert task.checkpoint_events(final=True)[0]["step"] == 3
        assert "read-only" in "".join(e["data"] for e in task.log_events(final=True))
        task.close()
        users.release(user)
    finally:
        shutil.rmtree(root)


DOC = Path(__file__).resolve().parents[2] / "docs" / "checkpoints.md"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_docs_name_every_helper_the_agent_installs(tmp_path):
    """docs/checkpoints.md said the directory held only `mlqueue/__init__.py` (empty) and
    `mlqueue/checkpoint.py`: the package's __init__ defines `report()`, and metrics_report.py
    is shipped too."""
    section = DOC.read_text().split("### Where a job's Python finds `mlqueue.checkpoint`", 1)[1].split("\n## ", 1)[0]
    installed = sorted(p.name for p in (install_helpers(tmp_path / "agent") / "mlqueue").iterdir())
    assert [name for name in installed if f"`mlqueue/{name}`" not in " ".join(section.split())] == []
    assert "(empty)" not in section


def test_an_example_that_checkpoints_in_tmp_is_said_to_be_for_the_demo():
    """The docs say never to checkpoint in /tmp (a root agent empties it after each task), and
    examples/train.json did, unexplained: each such example is named as the one-machine demo's."""
    text = " ".join(DOC.read_text().split())
    in_tmp = [
        path.name
        for path in sorted(EXAMPLES.glob("*.json"))
        if str((json.loads(path.read_text()).get("checkpoint") or {}).get("path", "")).startswith(
            ("/tmp/", "/var/tmp/", "/dev/shm/")
        )
    ]
    assert in_tmp == ["train.json"]  # the demo's; another one wants the same sentence
    assert all(f"`examples/{name}` checkpoints to" in text and "one-machine demo" in text for name in in_tmp)
