"""Task users: one UID per running task from a pool (or the owner's mapped UID), and nothing of
a task left for the next holder of its UID: no process that escaped its group, no file in the
shared temporary directories, no way into its old directory."""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from agents.node.isolation import NoTaskUser, TaskUsers, load_user_map, parse_uid_range, processes_of
from agents.node.runtime import TaskProcess
from tests.unit.leases import a_lease

ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
needs_root = pytest.mark.skipif(
    not ROOT,
    reason="switching users needs root; without it the agent runs tasks as "
    "itself and warns (test_agent_secrets covers what it still hides)",
)


# A pool no agent on this machine uses: acquiring without a slot skips UIDs that have processes,
# and a demo's or a walkthrough's agent runs tasks in the default range (200000-299999), which
# made the first test fail while one ran.
POOL = 3_000_000_000


def test_each_running_task_gets_a_uid_of_its_own_and_a_mapped_owner_keeps_theirs():
    users = TaskUsers(uids=range(POOL, POOL + 2), user_map={"alice": (5001, 5001)})
    first, second = users.acquire("bob"), users.acquire("victor")  # no slot (an older server): from the top
    assert (first.uid, second.uid, first.pooled) == (POOL + 1, POOL, True)
    with pytest.raises(OSError, match="no free task UID"):
        users.acquire("carol")
    assert users.acquire("alice").uid == users.acquire("alice").uid == 5001
    assert TaskUsers.none().acquire("bob") is None and TaskUsers.none().mode == "none"


def test_a_jobs_tasks_run_as_its_slots_uid_every_rank_and_attempt():
    users = TaskUsers(uids=range(POOL, POOL + 4))
    rank0, rank1 = users.acquire("bob", job_id=7, slot=2), users.acquire("bob", job_id=7, slot=2)
    assert rank0.uid == rank1.uid == POOL + 2 and rank0.pooled
    assert users.acquire("bob", job_id=8, slot=0).uid == POOL  # another job: its own slot's
    with pytest.raises(NoTaskUser, match="slot 2\\) is still held on this node by the job that had the slot before"):
        users.acquire("carol", job_id=9, slot=2)  # the slot went to job 9 while job 7 still stops here
    users.release(rank0)
    users.release(rank1)
    assert users.acquire("carol", job_id=9, slot=2).uid == POOL + 2
    again = users.acquire("bob", job_id=7, slot=3)  # a later attempt given another slot
    assert again.uid == POOL + 3
    with pytest.raises(NoTaskUser, match=f"job 10's task slot 4 is past the 4 UIDs of --task-uids {POOL}-{POOL + 3}"):
        users.acquire("dave", job_id=10, slot=4)
    assert users.acquire("eve", job_id=11).uid == POOL + 1  # a server that gives no slot: the free one


def test_a_user_map_inside_the_pool_is_refused():
    with pytest.raises(ValueError, match="--task-user-map gives alice UIDs inside --task-uids 200000-299999"):
        TaskUsers(uids=range(200000, 300000), user_map={"alice": (201234, 201234), "bob": (5002, 5002)})


def test_an_agent_refuses_a_uid_range_that_overlaps_a_live_agents_on_the_machine(tmp_path):
    other = TaskUsers(uids=range(200500, 201500))
    other.claim(tmp_path)  # a live agent holds 200500-201499
    with pytest.raises(OSError, match="task UIDs 200000-200999 overlap 200500-201499, the range of another agent"):
        TaskUsers(uids=range(200000, 201000)).claim(tmp_path)
    with pytest.raises(OSError, match="task UIDs 200500-201499 overlap 200500-201499"):
        TaskUsers(uids=range(200500, 201500)).claim(tmp_path)  # the same range: its lock is held
    TaskUsers(uids=range(300000, 301000)).claim(tmp_path)  # apart: fine
    other._range_lock.close()  # that agent ended: its lock file stays, held by no one
    TaskUsers(uids=range(200000, 201000)).claim(tmp_path)


@pytest.mark.parametrize(
    "text, problem",
    [
        ("200000", "FIRST-LAST"),
        ("0-10", "no system accounts"),
        ("5-x", "FIRST-LAST"),
        ("300-200", "no system accounts"),
    ],
)
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
def test_a_uid_still_running_anything_is_not_handed_out_and_a_restart_sweeps_the_pool():
    users = TaskUsers(uids=range(200510, 200513))
    leftover = subprocess.Popen(["/bin/sleep", "300"], user=200510, group=200510, extra_groups=[], cwd="/")
    try:
        assert [users.acquire("a").uid, users.acquire("b").uid] == [200512, 200511]
        users.sweep()  # as an agent does when it starts
        leftover.wait(timeout=5)
        assert processes_of(200510) == []
    finally:
        leftover.kill()


@needs_root
def test_a_fork_loop_does_not_outlive_its_uids_release():
    users = TaskUsers(uids=range(200520, 200521))
    user = users.acquire("mallory")
    loop = "i=0; while [ $i -lt 400 ]; do (sleep 300 &) ; i=$((i+1)); done; sleep 300"
    subprocess.Popen(
        ["/bin/sh", "-c", f"setsid /bin/sh -c '{loop}' &"], user=user.uid, group=user.gid, extra_groups=[], cwd="/"
    ).wait(timeout=10)
    deadline = time.monotonic() + 10
    while len(processes_of(user.uid)) < 50 and time.monotonic() < deadline:
        time.sleep(0.05)
    users.release(user)
    assert processes_of(user.uid) == []


@needs_root
def test_releasing_a_uid_kills_what_escaped_and_removes_its_temporary_files():
    users = TaskUsers(uids=range(200500, 200501))
    user = users.acquire("bob")
    leftover = Path(f"/tmp/mlq-leftover-{user.uid}")
    # A daemon that left the task's session, and a file in /tmp: both outlive the task.
    subprocess.run(
        ["/bin/sh", "-c", f"setsid sleep 300 & echo x > {leftover}"],
        user=user.uid,
        group=user.gid,
        extra_groups=[],
        check=True,
        cwd="/",
    )
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
    task = TaskProcess(
        {"job_id": 1, "rank": 0, "attempt": 1, "command": ["/bin/sh", "-c", "echo hi > out; id -u"], "env": {}},
        tmp_path,
        user=user,
        lease_file=a_lease(tmp_path),
    )
    task.process.wait(timeout=10)
    assert (task.work / "out").stat().st_uid == user.uid
    assert task.work.stat().st_mode & 0o777 == 0o700 and task.work.stat().st_uid == user.uid
    assert task.log_events(final=True)[0]["data"] == f"{user.uid}\n"
    assert task.streams[0].path.stat().st_uid == 0  # the log is the agent's, out of the task's reach
    task.close()
    users.release(user)
    assert task.work.stat().st_uid == 0
    probe = subprocess.run(
        ["/bin/cat", str(task.work / "out")],
        user=user.uid,
        group=user.gid,
        extra_groups=[],
        capture_output=True,
        cwd="/",
    )
    assert probe.returncode != 0 and b"Permission denied" in probe.stderr


def test_nothing_a_task_sets_runs_inside_the_agents_supervisor(tmp_path):
    """The supervisor runs as the agent's user (root, when tasks have users of their own): a
    task's PYTHONPATH with a sitecustomize, or its own directory on sys.path, must not run
    code there. The task itself is a shell, so any marker comes from the supervisor."""
    tmp_path.chmod(0o711)
    evil = tmp_path / "evil"
    evil.mkdir(mode=0o755)
    marker = tmp_path / "ran-as"
    payload = f"import os\nopen({str(marker)!r}, 'a').write(str(os.getuid()))\n"
    (evil / "sitecustomize.py").write_text(payload)
    (evil / "agents.py").write_text(payload)
    users = TaskUsers(uids=range(200700, 200701)) if ROOT else TaskUsers.none()
    user = users.acquire("mallory")
    task = TaskProcess(
        {
            "job_id": 1,
            "rank": 0,
            "attempt": 1,
            "command": ["/bin/sh", "-c", "echo done"],
            "env": {
                "PYTHONPATH": str(evil),
                "PYTHONSTARTUP": str(evil / "sitecustomize.py"),
                "PYTHONWARNINGS": "error",
            },
        },
        tmp_path,
        user=user,
        lease_file=a_lease(tmp_path),
    )
    assert task.process.wait(timeout=20) == 0
    assert task.log_events(final=True)[0]["data"] == "done\n"
    assert not marker.exists()


def test_an_image_cannot_add_options_to_the_container_runtime():
    from agents.node.runtime import hooked

    assert hooked("podman run --rm {image}", "registry.example.com/a/b:1.0") == [
        "podman",
        "run",
        "--rm",
        "registry.example.com/a/b:1.0",
    ]
    assert hooked("apptainer exec docker://{image}", "x/y@sha256:ab") == ["apptainer", "exec", "docker://x/y@sha256:ab"]
    for bad in ("--privileged -v /:/host x", "-v/:/host", "x y", "x;rm -rf /"):
        with pytest.raises(OSError, match="not an image reference"):
            hooked("podman run {image}", bad)
