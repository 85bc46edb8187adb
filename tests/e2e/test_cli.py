"""`mlq`, the real executable, against a live cluster (web, scheduler, an agent) (issue 15):
submit a YAML file with --set, queue -o json, status, logs -f that ends with the job, cancel,
--wait's exit codes for a success and a failure, teams, and a member's refused quota edit;
login (a token of its own in a 0600 config), why on a job that cannot start now, and a bulk
cancel by filter.

The executable is what pip's console-script wrapper for `mlq = "mlqueue.cli:main"` is: this
interpreter running mlqueue.cli.main, with this checkout on its path (the shared virtualenv has
no editable install of each worktree)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from scheduling.models import Job, Node
from teams.api import NOT_A_LEAD
from teams.models import AuditEvent, EventKind, Quota
from tests.e2e.cluster import Cluster
from tests.e2e.processes import ROOT, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

NODE = {"name": "z1-r1-h100-01", "zone": "z1", "rack": "z1-r1"}
COUNT_STEPS = (
    "import os, time\nfor i in range(int(os.environ['STEPS'])):\n    print('step', i, flush=True)\n    time.sleep(1)\n"
)


@pytest.fixture
def cluster(tmp_path, demo):
    running = Cluster(tmp_path)
    yield running
    running.stop()


def mlq_executable(tmp_path):
    executable = tmp_path / "bin" / "mlq"
    executable.parent.mkdir(exist_ok=True)
    executable.write_text(f"#!{sys.executable}\nimport sys\nfrom mlqueue.cli import main\nsys.exit(main())\n")
    executable.chmod(0o755)
    return executable


@pytest.fixture
def mlq(tmp_path, cluster, api):
    """mlq(*args, user="alice") -> the finished process, as `alice` with her own token."""
    executable = mlq_executable(tmp_path)
    tokens = {}

    def run(*args, user="alice", timeout=60):
        if user not in tokens:
            tokens[user] = api(user)._credentials["HTTP_AUTHORIZATION"].split()[1]
        env = {
            "PATH": os.environ["PATH"],
            "PYTHONPATH": str(ROOT),
            "HOME": str(tmp_path / "home"),
            "MLQ_SERVER": cluster.url,
            "MLQ_TOKEN": tokens[user],
            "MLQ_USER": user,
        }
        return subprocess.run(
            [str(executable), *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=tmp_path
        )

    return run


def spec(tmp_path, name: str, code: str) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        textwrap.dedent(f"""\
            name: {name}
            team: research-foundation-models
            command: [{json.dumps(sys.executable)}, -c, {json.dumps(code)}]
            resources: {{gpu_type: H100, gpu_count: 1}}
            restart_policy: {{max_retries: 2}}
            """)
    )
    return str(path)


def test_mlq_against_a_live_cluster(cluster, mlq, tmp_path):
    cluster.start(agents=[NODE])
    wait_for(lambda: Node.objects.filter(state="READY").count() == 1, timeout=20, what="a READY node")

    # submit with --set (YAML scalars: the int 4, the string '3'), then status and logs -f until it ends
    counts = spec(tmp_path, "counts", COUNT_STEPS)
    submitted = mlq("submit", counts, "--set", "resources.gpu_count=4", "--set", "env.STEPS='3'", "-o", "json")
    assert submitted.returncode == 0, submitted.stderr
    job_id = json.loads(submitted.stdout)["id"]
    assert Job.objects.get(pk=job_id).gpu_count == 4
    followed = mlq("logs", str(job_id), "-f")
    assert followed.returncode == 0, followed.stderr + cluster.logs()
    assert followed.stdout.splitlines() == ["step 0", "step 1", "step 2"]
    assert Job.objects.get(pk=job_id).state == "SUCCEEDED"
    status = mlq("status", str(job_id), "-o", "yaml")
    assert status.returncode == 0 and "state: SUCCEEDED" in status.stdout
    assert "SUCCEEDED" in mlq("status", str(job_id)).stdout

    # --wait: 0 for a success, 1 for a failure with no retries left
    assert mlq("submit", spec(tmp_path, "ok", "print('ok')"), "--wait").returncode == 0
    failed = mlq(
        "submit", spec(tmp_path, "fails", "raise SystemExit(3)"), "--set", "restart_policy.max_retries=0", "--wait"
    )
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "FAILED" in failed.stdout

    # the queue as JSON: a job too big to start now waits there; cancel takes it out
    blocker = mlq("submit", spec(tmp_path, "blocker", "import time; time.sleep(60)"), "--set", "resources.gpu_count=8")
    big = mlq("submit", spec(tmp_path, "waits", "print(1)"), "--set", "resources.gpu_count=8", "-o", "json")
    assert blocker.returncode == 0 and big.returncode == 0, blocker.stderr + big.stderr
    waiting = json.loads(big.stdout)["id"]
    wait_for(
        lambda: waiting in [row["id"] for row in json.loads(mlq("queue", "-o", "json").stdout)],
        timeout=20,
        what="the big job in the queue",
    )
    cancelled = mlq("cancel", str(waiting), "--reason", "not needed")
    assert cancelled.returncode == 0, cancelled.stderr
    assert Job.objects.get(pk=waiting).state == "CANCELLED"
    blocker_id = Job.objects.get(name="blocker").pk
    assert mlq("cancel", str(blocker_id)).returncode == 0

    # teams, and a member's refused quota edit: the API's message, exit 1, nothing written
    teams = mlq("teams", "-o", "json")
    assert teams.returncode == 0
    assert "research-foundation-models" in [team["name"] for team in json.loads(teams.stdout)]
    quotas = list(Quota.objects.order_by("pk").values())
    refused = mlq("quota", "research-foundation-models", "--set", "H100=64", "--reason", "more")
    assert refused.returncode == 1
    assert refused.stderr.strip() == NOT_A_LEAD.format(team="research-foundation-models")
    assert refused.stdout == ""
    assert list(Quota.objects.order_by("pk").values()) == quotas
    assert not AuditEvent.objects.filter(kind=EventKind.QUOTA_CHANGED).exists()


def test_login_why_and_a_bulk_cancel(cluster, tmp_path, api):
    cluster.start(agents=[NODE])
    wait_for(lambda: Node.objects.filter(state="READY").count() == 1, timeout=20, what="a READY node")
    executable, home = mlq_executable(tmp_path), tmp_path / "home"
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "HOME": str(home)}  # no MLQ_SERVER, no token

    def mlq(*args, **kwargs):
        return subprocess.run([str(executable), *args], env=env, capture_output=True, text=True, timeout=60, **kwargs)

    # login: asks for the password, stores a token of its own, readable only by its owner
    logged_in = mlq("login", "--server", cluster.url, "--username", "alice", "--name", "e2e", input="demo\n")
    assert logged_in.returncode == 0, logged_in.stdout + logged_in.stderr
    config = home / ".config" / "mlqueue" / "config.toml"
    assert config.stat().st_mode & 0o777 == 0o600
    assert "e2e" in [token["name"] for token in json.loads(mlq("tokens", "-o", "json").stdout)]
    wrong = mlq("login", "--server", cluster.url, "--username", "alice", "--password", "nope")
    assert wrong.returncode == 1 and "password" in wrong.stderr.lower(), wrong.stderr

    # why: a gang of two 4-GPU tasks cannot start while another job holds half the only node;
    # one task would fit, and why says so
    blocker = mlq("submit", spec(tmp_path, "blocker", "import time; time.sleep(60)"), "--set", "resources.gpu_count=4")
    assert blocker.returncode == 0, blocker.stderr
    waits = json.loads(
        mlq(
            "submit",
            spec(tmp_path, "waits", "print(1)"),
            "--set",
            "resources.gpu_count=8",
            "--set",
            "resources.gpus_per_task=4",
            "-o",
            "json",
        ).stdout
    )["id"]
    wait_for(
        lambda: Job.objects.get(pk=waits).pending_reason_code not in ("", "NOT_YET_SCHEDULED"),
        timeout=20,
        what="the second job's reason",
    )

    def why_and_answer():
        """`mlq why` and the API's answer, read just before and just after it. The reason is
        live (a pass may reword it, its estimated start moves): a run during which it changed
        is read again."""
        before = api("alice").get(f"/api/v1/jobs/{waits}/why").json()
        why = mlq("why", str(waits))
        return (why, before) if api("alice").get(f"/api/v1/jobs/{waits}/why").json() == before else None

    why, answer = wait_for(why_and_answer, timeout=30, interval=0.5, what="a reason unchanged through `mlq why`")
    assert answer["suggestions"], answer
    assert why.returncode == 0, why.stderr
    assert f"reason: {answer['reason']['message']}" in why.stdout
    assert all(suggestion in why.stdout for suggestion in answer["suggestions"]), why.stdout

    # a bulk cancel by filter takes every pending job of alice's, and says which
    cancelled = mlq("cancel", "--mine", "--state", "pending", "--reason", "done for today", "-o", "json")
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(cancelled.stdout)["cancelled"] == [waits]
    assert Job.objects.get(pk=waits).state == "CANCELLED"
    assert mlq("cancel", str(Job.objects.get(name="blocker").pk)).returncode == 0


def test_hold_release_and_requeue(cluster, mlq, tmp_path):
    cluster.start(agents=[NODE])
    wait_for(lambda: Node.objects.filter(state="READY").count() == 1, timeout=20, what="a READY node")

    # requeue: a running job is stopped on its node (SIGTERM) and runs again as attempt 2, spending nothing
    runs = mlq("submit", spec(tmp_path, "runs", COUNT_STEPS), "--set", "env.STEPS='60'", "-o", "json")
    assert runs.returncode == 0, runs.stderr
    runs_id = json.loads(runs.stdout)["id"]
    wait_for(lambda: Job.objects.get(pk=runs_id).state == "RUNNING", timeout=30, what="the job running")
    requeued = mlq("requeue", str(runs_id), "--reason", "new image")
    assert requeued.returncode == 0, requeued.stderr
    wait_for(
        lambda: Job.objects.filter(pk=runs_id, state="RUNNING", tasks__attempt=2).exists(),
        timeout=60,
        what="the requeued job running again",
    )
    job = Job.objects.get(pk=runs_id)
    assert (job.retries_used, job.restarts_used, job.preemptions) == (0, 0, 0)

    # hold: a job waiting behind the running one stays PENDING, held, even once there is room
    waits = mlq("submit", spec(tmp_path, "waits", "print(1)"), "--set", "resources.gpu_count=8", "-o", "json")
    waits_id = json.loads(waits.stdout)["id"]
    held = mlq("hold", str(waits_id), "--reason", "not yet")
    assert held.returncode == 0, held.stderr
    assert held.stdout.strip() == f"job {waits_id} held by alice"
    assert "held by alice: not yet" in mlq("why", str(waits_id)).stdout
    assert mlq("cancel", str(runs_id)).returncode == 0
    wait_for(lambda: Job.objects.get(pk=runs_id).state == "CANCELLED", timeout=30, what="the running job cancelled")
    wait_for(
        lambda: Job.objects.get(pk=waits_id).pending_reason_code == "HELD", timeout=20, what="a pass after the cancel"
    )
    assert Job.objects.get(pk=waits_id).state == "PENDING"

    # release: it runs
    released = mlq("release", str(waits_id))
    assert released.returncode == 0, released.stderr
    wait_for(lambda: Job.objects.get(pk=waits_id).state == "SUCCEEDED", timeout=30, what="the released job done")
    refused = mlq("release", str(waits_id))
    assert refused.returncode == 1 and "not held" in refused.stderr
