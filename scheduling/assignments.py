"""What an agent is told to run for one task: the command, and the environment that makes a
restarted attempt resume (its attempt number, restart count and checkpoint directory) and a
gang rank find its peers (torchrun's variables)."""
from scheduling.models import Job, RestartMode, Task

MASTER_PORT_BASE = 29500
MASTER_PORT_RANGE = 20000


def master_port(job_id: int, attempt: int) -> int:
    """The same for every rank of an attempt; a new attempt gets another port, so a rank left
    over from the last attempt cannot join it."""
    return MASTER_PORT_BASE + (job_id * 7919 + attempt) % MASTER_PORT_RANGE


def checkpoint_dir(job: Job) -> str:
    return (job.checkpoint or {}).get("path", "")


def assignment_env(task: Task, *, job: Job, master_node: str) -> dict[str, str]:
    """The variables the agent sets for `task` (on top of the user's `env`)."""
    resume = job.on_preemption == RestartMode.RESUME or job.on_node_failure == RestartMode.RESUME
    env = {
        **{key: str(value) for key, value in (job.env or {}).items()},
        "MLQ_JOB_ID": str(job.pk),
        "MLQ_TASK_RANK": str(task.rank),
        "MLQ_ATTEMPT": str(task.attempt),
        "MLQ_EPOCH": str(task.epoch),
        "MLQ_RESTART_COUNT": str(job.restarts_used + job.retries_used),
        "MLQ_CHECKPOINT_DIR": checkpoint_dir(job),
        "MLQ_RESUME": "1" if resume and task.attempt > 1 and checkpoint_dir(job) else "0",
        "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in task.gpu_indices),
        "WORLD_SIZE": str(job.task_count),
        "RANK": str(task.rank),
        "NODE_RANK": str(task.rank),
        "LOCAL_RANK": "0",
        "MASTER_ADDR": master_node,
        "MASTER_PORT": str(master_port(job.pk, task.attempt)),
    }
    return env
