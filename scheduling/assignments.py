"""What an agent is told to run for one task: the command, and the environment that makes a
restarted attempt resume (its attempt number, restart count and checkpoint directory), a
gang rank find its peers (torchrun's variables) and a group's child know its place (its array
index, its sweep parameters). The job's secret_env is decrypted here and
nowhere else: it goes only into the assignment of the node that runs the task."""

import logging

from scheduling.groups import child_env
from scheduling.models import Job, Task
from scheduling.secrets import SecretEnvUnreadable, decrypt_env

log = logging.getLogger(__name__)

MASTER_PORT_BASE = 29500
MASTER_PORT_RANGE = 20000


def master_port(job_id: int, attempt: int) -> int:
    """The same for every rank of an attempt; a new attempt gets another port, so a rank left
    over from the last attempt cannot join it."""
    return MASTER_PORT_BASE + (job_id * 7919 + attempt) % MASTER_PORT_RANGE


JOB_ID_FIELD = "{job_id}"


def checkpoint_dir(job: Job) -> str:
    """`checkpoint.path`, with `{job_id}` replaced by the job's id: one spec submitted again
    (a rerun, an example) gets a directory of its own instead of resuming the last run's state.
    The same job's attempts share it: a requeued attempt resumes there."""
    return (job.checkpoint or {}).get("path", "").replace(JOB_ID_FIELD, str(job.pk))


CHECKPOINT_VARIABLES = ("MLQ_CHECKPOINT_DIR", "MLQ_CHECKPOINT_INTERVAL_S", "MLQ_CHECKPOINT_RETAIN_LAST_N")


def checkpoint_settings(job: Job) -> dict[str, str]:
    """How often the job's spec asks it to checkpoint and how many to keep, for
    mlqueue.checkpoint.due() and done() (docs/checkpoints.md); empty (then unset) without one."""
    block = job.checkpoint or {}
    interval = block.get("interval_minutes")
    keep = block.get("retain_last_n")
    return {
        "MLQ_CHECKPOINT_INTERVAL_S": str(int(interval) * 60) if interval else "",
        "MLQ_CHECKPOINT_RETAIN_LAST_N": str(int(keep)) if keep else "",
    }


def secret_env(job: Job) -> dict[str, str]:
    """The job's secret values. One that no configured key opens is left out and logged (by
    name, never value) rather than raised: the heartbeat that carries it also renews the node's
    lease, and failing it would kill every task on the node."""
    try:
        return decrypt_env(job.secret_env_ciphertext, job_id=job.pk)
    except SecretEnvUnreadable as exc:
        log.error("%s (names: %s)", exc, ", ".join(sorted(job.spec.get("secret_env", {}))))
        return {}


def assignment_env(task: Task, *, job: Job, master_node: str) -> dict[str, str]:
    """The variables the agent sets for `task`: the user's `env` and `secret_env`, then
    mlqueue's own (which neither may override)."""
    # As its last requeue's verdict said: from the checkpoint, or from the start (QA: a user's
    # requeue under on_preemption: restart resumed, on_node_failure's default deciding).
    resume = job.resume_next and task.attempt > 1 and checkpoint_dir(job)
    env = {
        **{key: str(value) for key, value in (job.env or {}).items()},
        **secret_env(job),
        "MLQ_JOB_ID": str(job.pk),
        "MLQ_TASK_RANK": str(task.rank),
        "MLQ_ATTEMPT": str(task.attempt),
        "MLQ_EPOCH": str(task.epoch),
        "MLQ_RESTART_COUNT": str(job.restarts_used + job.retries_used + job.preemptions),
        "MLQ_CHECKPOINT_DIR": checkpoint_dir(job),
        **checkpoint_settings(job),
        "MLQ_RESUME": "1" if resume else "0",
        **child_env(job),
        "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in task.gpu_indices),
        "WORLD_SIZE": str(job.task_count),
        "RANK": str(task.rank),
        "NODE_RANK": str(task.rank),
        "LOCAL_RANK": "0",
        "MASTER_ADDR": master_node,
        "MASTER_PORT": str(master_port(job.pk, task.attempt)),
    }
    # Without a checkpoint block these are unset, not empty (QA: int(os.environ.get(
    # "MLQ_CHECKPOINT_INTERVAL_S", "600")) raised, and an empty directory read as the work dir).
    return {name: value for name, value in env.items() if value or name not in CHECKPOINT_VARIABLES}
