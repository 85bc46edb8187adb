"""Jobs that name an image run in it with podman (agents/node/containers.py): in the image, as
the task's user, with the job's CPU and memory limits, its env (a PEM-like secret with line
breaks included) and none of the host's; a stop reaches the container's process; a container
that ignores it, one whose lease ran out and one an earlier agent left behind are removed.
The agent's own runtime first, then a whole cluster: submit, logs, cancel."""

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from agents.node.containers import Podman
from agents.node.isolation import TaskUser, can_switch_users
from agents.node.runtime import TaskProcess, install_helpers
from bench.containers import IMAGE, IMAGE_MARKER, IMAGE_MARKER_TEXT, RUNTIME_ARGS
from scheduling.models import Job, Node
from tests.e2e.cluster import Cluster
from tests.e2e.images import container_exists
from tests.e2e.processes import wait_for
from tests.unit.leases import a_lease

pytestmark = pytest.mark.e2e
TASK_UID = 200777
PEM = "-----BEGIN KEY-----\nMIIBVwIBADANBg\n-----END KEY-----\n"
PROBE = f"""
cat {IMAGE_MARKER}
echo "uid=$(id -u) cwd=$(pwd)"
if [ -e /sys/fs/cgroup/memory.max ]; then
  echo "memory=$(cat /sys/fs/cgroup/memory.max) cpu=$(cat /sys/fs/cgroup/cpu.max)"
else
  echo "memory=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes)" \\
       "cpu=$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)"
fi
echo "greeting=$GREETING key=$(printf %s "$KEY" | tr '\\n' '|')"
echo "cuda=$CUDA_VISIBLE_DEVICES nvidia=$NVIDIA_VISIBLE_DEVICES"
echo "shm=$(df -k /dev/shm | tail -n 1 | awk '{{print $2}}')k"
echo "path=$PATH"
"""
# Stops on SIGTERM, saying so, with an exit code of its own; or ignores it.
STOPPABLE = "trap 'echo got-term; exit 7' TERM; echo up; while :; do sleep 0.1; done"
STUBBORN = "trap '' TERM; echo up; while :; do sleep 0.1; done"


@pytest.fixture
def podman(podman_image, tmp_path) -> Podman:
    """A node named after this process: containers are named after their node, and the suite's
    workers run these tests side by side."""
    return Podman.find(RUNTIME_ARGS).for_node(f"c{os.getpid()}", tmp_path / "node")


def task_user() -> TaskUser | None:
    return TaskUser(TASK_UID, TASK_UID, f"mlq-task-{TASK_UID}", pooled=True) if can_switch_users() else None


def start(podman: Podman, tmp_path: Path, script: str, *, lease: Path | None = None, **env) -> TaskProcess:
    assignment = {
        "job_id": 41,
        "rank": 0,
        "attempt": 1,
        "image": IMAGE,
        "command": ["sh", "-c", script],
        "cpus": 2,
        "memory_gb": 1,
        "gpu_indices": [],
        "env": env,
    }
    workdir = tmp_path / "node"
    return TaskProcess(
        assignment,
        workdir,
        lease_file=lease or a_lease(tmp_path),
        container=podman,
        user=task_user(),
        helpers=install_helpers(workdir),
    )


def stdout(task: TaskProcess) -> str:
    return task.streams[0].path.read_text()


def wait_exit(task: TaskProcess, timeout_s: float) -> float:
    """Seconds until the task exited (failing past `timeout_s`)."""
    began = time.monotonic()
    wait_for(task.poll, timeout=timeout_s, what="the container task to exit")
    return time.monotonic() - began


def test_a_task_runs_in_its_image_as_its_user_with_its_limits_and_env(podman, tmp_path):
    task = start(podman, tmp_path, PROBE, GREETING="hello from the job", KEY=PEM)
    wait_exit(task, 60)
    out = stdout(task)
    assert task.exit_code == 0, (out, task.streams[1].path.read_text())
    assert out.splitlines()[0] == IMAGE_MARKER_TEXT  # a file only the image holds
    assert f"uid={TASK_UID if can_switch_users() else 0} cwd={task.work}" in out
    # 1 GiB, and 2 CPUs as a quota of twice the period (cgroup v1 or v2)
    assert "memory=1073741824 cpu=200000 100000" in out
    assert f"greeting=hello from the job key={PEM.replace(chr(10), '|')}" in out
    assert "cuda= nvidia=void" in out  # no GPUs assigned: none visible
    assert "shm=1048576k" in out  # /dev/shm as large as the memory limit
    assert str(Path(os.environ["PATH"].split(":")[0])) not in out.split("path=")[1]  # not the host's PATH
    events = task.log_events(final=True)
    assert "".join(e["data"] for e in events if e["stream"] == "stdout") == out  # shipped as the job's log
    task.close()


def test_sigterm_reaches_the_containers_process_and_no_secret_is_on_a_command_line(podman, tmp_path):
    task = start(podman, tmp_path, STOPPABLE, KEY=PEM, TOKEN="tok-0451-not-in-argv")
    wait_for(lambda: "up" in stdout(task), timeout=60, what="the container to start")
    command_lines = [p.read_bytes() for p in Path("/proc").glob("[0-9]*/cmdline") if _readable(p)]
    assert any(task.container_name.encode() in line for line in command_lines)
    assert not any(b"tok-0451" in line or b"MIIBVwIBADANBg" in line for line in command_lines)

    task.send("TERM")
    assert wait_exit(task, 10) < 5
    assert task.exit_code == 7 and "got-term" in stdout(task)
    wait_for(lambda: not container_exists(task.container_name), timeout=30, what="podman to remove the container")
    task.close()


def test_a_container_that_ignores_sigterm_is_removed_by_the_kill(podman, tmp_path):
    task = start(podman, tmp_path, STUBBORN)
    wait_for(lambda: "up" in stdout(task), timeout=60, what="the container to start")
    task.send("TERM")
    time.sleep(1)
    assert task.running
    task.send("KILL")
    wait_exit(task, 30)
    assert not container_exists(task.container_name)  # and its processes with it
    task.close()


def test_when_the_lease_runs_out_the_supervisor_removes_the_container(podman, tmp_path):
    task = start(podman, tmp_path, STUBBORN, lease=a_lease(tmp_path, seconds=3, grace_s=1))
    wait_for(lambda: "up" in stdout(task), timeout=60, what="the container to start")
    wait_exit(task, 40)
    assert task.poll() is False and task.cause == "lease_expired"
    assert not container_exists(task.container_name)
    task.close()


def test_an_agent_starting_removes_the_containers_an_earlier_run_left(podman, podman_image):
    name = f"mlq-{podman.node}-99-0-1"
    subprocess.run(
        ["podman", "run", "-d", "--name", name, "--label", f"mlqueue.agent={podman.owner}", *RUNTIME_ARGS.split()]
        + [podman_image, "sleep", "300"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    assert podman.sweep() == 1
    assert not container_exists(name)


def _readable(path: Path) -> bool:
    try:
        path.read_bytes()
        return True
    except OSError:
        return False


# --- a whole cluster -------------------------------------------------------------------------
NODE = {"name": "z1-r1-ctr-01", "zone": "z1", "rack": "z1-r1", "gpu_type": "", "gpu_count": 0}


@pytest.fixture
def cluster(tmp_path, demo, podman_image):
    running = Cluster(tmp_path).start(agents=[])
    running.add_agent(
        NODE,
        isolation="uid" if can_switch_users() else "none",
        args=("--container-runtime", "podman", "--container-runtime-args", RUNTIME_ARGS),
    )
    wait_for(lambda: Node.objects.filter(name=NODE["name"], state="READY").exists(), timeout=20, what="the node")
    yield running
    running.stop()


def submit(api, script: str, image: str) -> int:
    body = {
        "team": "research-foundation-models",
        "name": "in-its-image",
        "image": image,
        "command": ["sh", "-c", script],
        "resources": {"tasks": 1, "cpu_per_rank": 1, "memory_per_rank_gb": 2},
        "grace_period_seconds": 10,
        "env": {"GREETING": "hello from the spec"},
        "secret_env": {"KEY": PEM},
    }
    response = api("alice").post("/api/v1/jobs", body, format="json")
    assert response.status_code == 201, response.json()
    return response.json()["id"]


def job_log(api, job_id: int) -> str:
    return api("alice").get(f"/api/v1/jobs/{job_id}/logs?rank=0").json()["text"]


@pytest.mark.django_db(transaction=True)
def test_a_submitted_job_runs_in_its_image_a_cancel_stops_it_and_a_dead_agent_leaves_no_container(
    cluster, api, podman_image
):
    try:
        done = submit(api, PROBE, podman_image)
        wait_for(lambda: Job.objects.get(pk=done).state == "SUCCEEDED", timeout=90, what="the job in its image")
        wait_for(lambda: "path=" in job_log(api, done), timeout=10, what="its log")
        log = job_log(api, done)
        assert log.startswith(IMAGE_MARKER_TEXT)
        assert "memory=2147483648 cpu=100000 100000" in log
        assert f"greeting=hello from the spec key={PEM.replace(chr(10), '|')}" in log

        running = submit(api, STOPPABLE, podman_image)
        wait_for(lambda: "up" in job_log(api, running), timeout=90, what="the second job to start")
        assert api("alice").post(f"/api/v1/jobs/{running}/cancel").status_code == 200
        began = time.monotonic()
        wait_for(lambda: Job.objects.get(pk=running).state == "CANCELLED", timeout=30, what="the cancel")
        assert time.monotonic() - began < 10  # within its grace: it stopped on SIGTERM
        wait_for(lambda: "got-term" in job_log(api, running), timeout=10, what="the job's own word on SIGTERM")

        stubborn = submit(api, STUBBORN, podman_image)
        wait_for(lambda: "up" in job_log(api, stubborn), timeout=90, what="the third job to start")
        name = f"mlq-{NODE['name']}-{stubborn}-0-1"
        assert container_exists(name)
        cluster.agents[NODE["name"]].signal(signal.SIGKILL)  # its supervisors remove their containers
        wait_for(lambda: not container_exists(name), timeout=30, what="the dead agent's container to go")
    except AssertionError:
        raise AssertionError(cluster.logs()) from None
