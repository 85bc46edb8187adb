"""Task users: one UID per running task from a pool (or the owner's mapped UID), and nothing of
a task left for the next holder of its UID: no process that escaped its group, no file in the
shared temporary directories, no way into its old directory."""
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from agents.isolation import TaskUsers, load_user_map, parse_uid_range, processes_of
from agents.runtime import TaskProcess

ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="switching users needs root; without it the agent runs tasks as "
                                                 "itself and warns (test_agent_secrets covers what it still hides)")


def test_each_running_task_gets_a_uid_of_its_own_and_a_mapped_owner_keeps_theirs():
    users = TaskUsers(uids=range(200000, 200002), user_map={"alice": (5001, 5001)})
    first, second = users.acquire("bob"), users.acquire("victor")
    assert (first.uid, second.uid, first.pooled) == (200000, 200001, True)
    with pytest.raises(OSError, match="no free task UID"):
        users.acquire("carol")
    assert users.acquire("alice").uid == users.acquire("alice").uid == 5001
    assert TaskUsers.none().acquire("bob") is None and TaskUsers.none().mode == "none"


@pytest.mark.parametrize("text, problem", [("200000", "FIRST-LAST"), ("0-10", "no system accounts"),
                                           ("5-x", "FIRST-LAST"), ("300-200", "no system accounts")])
def test_a_bad_uid_range_is_refused(text, problem):
    with pytest.raises(ValueError, match=problem):
        parse_uid_range(text)


def test_a_user_map_needs_uids_outside_the_system_range(tmp_path):
    path = tmp_path / "map.json"
    path.write_text(json.dumps({"alice": 5001, "bob": {"uid": 5002, "gid": 6000}}))
    assert load_user_map(path) == {"alice": (5001, 5001), "bob": (5002, 6000)}
    path.write_text(json.dumps({"bob": {"uid": 5002, "gid": 27}}))
    with pytest.raises(ValueError, match="1000 or more"):
        load_user_map(path)  # a system group
    path.write_text(json.dumps({"alice": "root"}))
    with pytest.raises(ValueError, match="1000 or more"):
        load_user_map(path)


@needs_root
def test_releasing_a_uid_kills_what_escaped_and_removes_its_temporary_files():
    users = TaskUsers(uids=range(200500, 200501))
    user = users.acquire("bob")
    leftover = Path(f"/tmp/mlq-leftover-{user.uid}")
    # A daemon that left the task's session, and a file in /tmp: both outlive the task.
    subprocess.run(["/bin/sh", "-c", f"setsid sleep 300 & echo x > {leftover}"], user=user.uid, group=user.gid,
                   extra_groups=[], check=True, cwd="/")
    assert processes_of(user.uid) and leftover.exists()
    users.release(user)
    deadline = time.monotonic() + 5
    while processes_of(user.uid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_of(user.uid) == [] and not leftover.exists()


@needs_root
def test_a_finished_tasks_directory_is_closed_to_the_next_holder_of_its_uid(tmp_path):
    tmp_path.chmod(0o711)
    users = TaskUsers(uids=range(200600, 200601))
    user = users.acquire("bob")
    task = TaskProcess({"job_id": 1, "rank": 0, "attempt": 1, "command": ["/bin/sh", "-c", "echo hi > out; id -u"],
                        "env": {}}, tmp_path, user=user)
    task.process.wait(timeout=10)
    assert (task.work / "out").stat().st_uid == user.uid
    assert task.work.stat().st_mode & 0o777 == 0o700 and task.work.stat().st_uid == user.uid
    assert task.log_events(final=True)[0]["data"] == f"{user.uid}\n"
    assert task.streams[0].path.stat().st_uid == 0  # the log is the agent's, out of the task's reach
    task.close()
    users.release(user)
    assert task.work.stat().st_uid == 0
    probe = subprocess.run(["/bin/cat", str(task.work / "out")], user=user.uid, group=user.gid, extra_groups=[],
                           capture_output=True, cwd="/")
    assert probe.returncode != 0 and b"Permission denied" in probe.stderr
