"""Hostile jobs on a real agent: one looks for the agent's secrets (its environment, every
process's command line and environment) and finds none; two jobs of two teams on one node
cannot read each other's environment or files, nor signal each other's processes."""

import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from django.conf import settings

from scheduling.models import Job, Node
from tests.e2e.cluster import JOIN_TOKEN, Cluster
from tests.e2e.processes import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
ISOLATED = hasattr(os, "geteuid") and os.geteuid() == 0
NODE = {"name": "z1-r1-h100-01", "zone": "z1", "rack": "z1-r1"}
A_SECRET = "alpha-secret-value-0451"

# Job A: notes where it is, keeps a private file, and waits for B to have tried.
VICTIM = """
echo "uid=$(id -u)"
echo $$ > "$SHARED/a.pid"; pwd > "$SHARED/a.pwd"
echo "file:$A_SECRET" > mine.txt
i=0; while [ ! -e "$SHARED/b.done" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
cat mine.txt
"""

# Job B: everything a job's own code could try against A and against the agent.
ATTACKER = """
i=0; while [ ! -e "$SHARED/a.pwd" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
pid=$(cat "$SHARED/a.pid"); dir=$(cat "$SHARED/a.pwd")
echo "uid=$(id -u)"
if cat /proc/$pid/environ >/dev/null 2>&1; then echo environ=READ; else echo environ=DENIED; fi
if cat "$dir/mine.txt" >/dev/null 2>&1; then echo file=READ; else echo file=DENIED; fi
if ls "$dir" >/dev/null 2>&1; then echo list=READ; else echo list=DENIED; fi
if kill -0 $pid 2>/dev/null; then echo signal=SENT; else echo signal=DENIED; fi
echo ---env; env
echo ---cmdlines; for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null; echo; done
echo ---environs; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f 2>/dev/null; done
touch "$SHARED/b.done"
"""


@pytest.fixture
def base_dir():
    """A directory other users can traverse (pytest's own are 0700 to root), so that the only
    thing standing between two tasks is what the agent set up."""
    path = Path(tempfile.mkdtemp(prefix="mlq-isolation-", dir="/tmp"))
    path.chmod(0o711)
    (path / "shared").mkdir(mode=0o1777)
    (path / "shared").chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def cluster(tmp_path, demo, base_dir):
    running = Cluster(tmp_path).start(agents=[])
    running.add_agent(NODE, isolation="uid" if ISOLATED else "none", workdir=base_dir / "agents")
    wait_for(lambda: Node.objects.filter(name=NODE["name"], state="READY").exists(), timeout=20, what="the node")
    yield running
    running.stop()


def submit(api, user: str, team: str, script: str, base_dir: Path, **secrets) -> int:
    body = {
        "team": team,
        "name": f"{user}-job",
        "command": ["/bin/sh", "-c", script],
        "resources": {"gpu_count": 1, "gpu_type": "H100", "cpu_per_rank": 1, "memory_per_rank_gb": 1},
        "env": {"SHARED": str(base_dir / "shared")},
        "secret_env": secrets,
    }
    response = api(user).post("/api/v1/jobs", body, format="json")
    assert response.status_code == 201, response.json()
    return response.json()["id"]


def output(api, user: str, job_id: int) -> str:
    return api(user).get(f"/api/v1/jobs/{job_id}/logs?rank=0").json()["text"]


def run_both(cluster, api, base_dir) -> tuple[str, str]:
    victim = submit(api, "alice", "research-foundation-models", VICTIM, base_dir, A_SECRET=A_SECRET)
    wait_for(lambda: (base_dir / "shared" / "a.pwd").exists(), timeout=30, what="job A to start")
    attacker = submit(api, "bob", "production-ranking", ATTACKER, base_dir)
    try:
        for job_id in (attacker, victim):
            wait_for(
                lambda job_id=job_id: Job.objects.get(pk=job_id).state == "SUCCEEDED", timeout=40, what=f"job {job_id}"
            )
        wait_for(lambda: f"file:{A_SECRET}" in output(api, "alice", victim), timeout=10, what="A's log")
        wait_for(lambda: "---environs" in output(api, "bob", attacker), timeout=10, what="B's log")
    except AssertionError:
        raise AssertionError(cluster.logs()) from None
    return output(api, "alice", victim), output(api, "bob", attacker)


def shows(text: str, secret: str) -> bool:
    """`secret` whole in `text`. The job sees every process's command line on the machine, and
    another test's may hold a longer value that begins with it (a benchmark's scratch database,
    `<DATABASE_URL>_bench_...`), which is not this cluster's secret."""
    return re.search(re.escape(secret) + r"(?![\w-])", text) is not None


def sections(found: str) -> dict[str, str]:
    """The attacker's output by its `---name` lines. Only a whole line is a marker: the listed
    command lines include the attacker's own script, whose `echo ---environs` cut the listing
    short wherever its pid sorted before the agent's (a flake of about one CI run in four)."""
    parts = re.split(r"^---(env|cmdlines|environs)$", found, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_a_hostile_job_finds_none_of_the_agents_secrets(cluster, api, base_dir):
    _, found = run_both(cluster, api, base_dir)
    parts = sections(found)
    env, cmdlines = parts["env"], parts["cmdlines"]
    assert "agents.node.daemon" in cmdlines  # it did see the agent's command line
    for secret in (JOIN_TOKEN, settings.SECRET_KEY, settings.DATABASE_URL, settings.REDIS_URL):
        assert not shows(env, secret) and not shows(cmdlines, secret), secret
    assert "MLQ_AGENT" not in env and "DATABASE_URL" not in env and "REDIS_URL" not in env
    if ISOLATED:  # without isolation a job shares the agent's user, and /proc/<agent>/environ with it
        assert JOIN_TOKEN not in found and "DATABASE_URL" not in parts["environs"]


@pytest.mark.skipif(
    not ISOLATED,
    reason="switching users needs root: as another user the agent runs every task "
    "as itself, and says so (see test_nodes_page)",
)
def test_two_teams_jobs_on_one_node_cannot_read_or_signal_each_other(cluster, api, base_dir):
    victim_out, found = run_both(cluster, api, base_dir)
    attacker_uid = found.split("uid=")[1].split()[0]
    victim_uid = victim_out.split("uid=")[1].split()[0]
    assert attacker_uid != victim_uid and "0" not in (attacker_uid, victim_uid)
    assert [
        line
        for line in found.splitlines()
        if "=" in line and line.split("=")[0] in ("environ", "file", "list", "signal")
    ] == ["environ=DENIED", "file=DENIED", "list=DENIED", "signal=DENIED"]
    assert [line for line in found.splitlines() if A_SECRET in line] == []  # neither its env nor its file
    assert victim_out.strip().endswith(f"file:{A_SECRET}")  # A ran to its end, untouched
    assert Node.objects.get(name=NODE["name"]).task_isolation == "uid"


# A checkpointing job: its first attempt saves, its next resumes from what the first saved.
RESUMER = """
echo "uid=$(id -u) attempt=$MLQ_ATTEMPT"
mkdir -p "$MLQ_CHECKPOINT_DIR"
if [ -e "$MLQ_CHECKPOINT_DIR/state" ]; then echo "resumed:$(cat "$MLQ_CHECKPOINT_DIR/state")"; exit 0; fi
echo step-42 > "$MLQ_CHECKPOINT_DIR/state" && touch "$SHARED/saved"
i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
"""


@pytest.mark.skipif(not ISOLATED, reason="switching users needs root")
def test_a_requeued_attempt_runs_as_the_same_user_and_reads_its_own_checkpoint(cluster, api, base_dir):
    """Each attempt had a pool UID of its own: the next attempt could not enter the 0700
    checkpoint directory the first made, failed at once and spent the job's retries. A job's
    attempts now share its slot's UID."""
    body = {
        "team": "research-foundation-models",
        "name": "resumer",
        "command": ["/bin/sh", "-c", RESUMER],
        "resources": {"gpu_count": 1, "gpu_type": "H100", "cpu_per_rank": 1, "memory_per_rank_gb": 1},
        "env": {"SHARED": str(base_dir / "shared")},
        "checkpoint": {"path": str(base_dir / "shared" / "ckpt-{job_id}")},
        "grace_period_seconds": 5,
    }
    response = api("alice").post("/api/v1/jobs", body, format="json")
    assert response.status_code == 201, response.json()
    job_id = response.json()["id"]
    try:
        wait_for(lambda: (base_dir / "shared" / "saved").exists(), timeout=30, what="the first attempt's save")
        requeued = api("alice").post(f"/api/v1/jobs/{job_id}/requeue", {"reason": "test"}, format="json")
        assert requeued.status_code == 200, requeued.json()
        wait_for(lambda: Job.objects.get(pk=job_id).state == "SUCCEEDED", timeout=60, what="the second attempt")
    except AssertionError:
        raise AssertionError(cluster.logs()) from None

    def log(attempt: int) -> str:
        return api("alice").get(f"/api/v1/jobs/{job_id}/logs?rank=0&attempt={attempt}").json()["text"]

    wait_for(lambda: "resumed:" in log(2), timeout=10, what="the second attempt's log")
    first, second = log(1), log(2)
    assert "resumed:step-42" in second, second
    assert first.split("uid=")[1].split()[0] == second.split("uid=")[1].split()[0] != "0"
    job = Job.objects.get(pk=job_id)
    assert (job.retries_used, job.run_slot is not None) == (0, True)
