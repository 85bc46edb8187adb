"""What an agent is told to run for one task: the command, and the environment that makes a
restarted attempt resume (its attempt number, restart count and checkpoint directory), a
gang rank find its peers (torchrun's variables, the master port chosen once per attempt when
it is placed) and a group's child know its place (its array index, its sweep parameters).
docs/task-environment.md lists every variable. The job's secret_env is decrypted here and
nowhere else: it goes only into the assignment of the node that runs the task."""

import logging
from collections.abc import Iterable, Sequence

from django.db.models import Q

from scheduling.groups import child_env
from scheduling.models import Job, Task
from scheduling.secrets import SecretEnvUnreadable, decrypt_env
from scheduling.states import ON_NODE

log = logging.getLogger(__name__)

# From torchrun's default up to just below Linux's ephemeral range (32768-60999 by default,
# net.ipv4.ip_local_port_range): a port in that range may be taken by any outgoing connection
# on the node when rank 0 comes to bind it.
MASTER_PORTS = range(29500, 32768)
# What attempts placed before ports were stored were told (and still are, while they run).
LEGACY_PORT_BASE = 29500
LEGACY_PORT_RANGE = 20000


def master_port(job_id: int, attempt: int) -> int:
    """Where an attempt's search for a free master port starts: a new attempt starts elsewhere,
    so a rank left over from the last attempt cannot join it."""
    return MASTER_PORTS[(job_id * 7919 + attempt) % len(MASTER_PORTS)]


def legacy_master_port(job_id: int, attempt: int) -> int:
    return LEGACY_PORT_BASE + (job_id * 7919 + attempt) % LEGACY_PORT_RANGE


def attempt_master_port(job: Job, attempt: int) -> int:
    """The port every rank of the job's current attempt is told, however often it is sent."""
    return job.master_port if job.master_port is not None else legacy_master_port(job.pk, attempt)


class MasterPorts:
    """The master ports in use on the nodes a pass places rank 0s on, read once (one query)
    for the pass's placements, with the attempt numbers those placements will have. Only the
    leader places, so ports taken since the read are the ones this pass handed out; ports freed
    since are only missed until the next pass.

    A port is in use while its attempt's rank 0 is on the node (ASSIGNED, RUNNING, stopping):
    two masters on one node must not share one (QA: jobs 13 and 20013 both got 32448; the second
    failed to bind, which spent its user's retries)."""

    def __init__(self, masters: dict[int, int]):
        """`masters`: each job to place -> the id of the node its rank 0 goes to."""
        self.taken: dict[int, set[int]] = {node_id: set() for node_id in masters.values()}
        self.attempt: dict[int, int] = {}
        if not masters:
            return
        rows = (
            Task.objects.filter(rank=0)
            .filter(Q(job_id__in=list(masters)) | Q(node_id__in=set(masters.values()), state__in=ON_NODE))
            .values_list("job_id", "node_id", "state", "attempt", "job__master_port")
        )
        for job_id, node_id, state, attempt, port in rows:
            if state in ON_NODE and node_id in self.taken:
                self.taken[node_id].add(port if port is not None else legacy_master_port(job_id, attempt))
            if job_id in masters:
                self.attempt[job_id] = attempt + 1  # placing it starts its next attempt

    def port_for(self, job_id: int, node_id: int) -> int:
        """A port free on `node_id` for `job_id`'s next attempt, counted as taken from now on."""
        taken = self.taken.setdefault(node_id, set())
        port = free_master_port(job_id, self.attempt.get(job_id, 1), taken=taken)
        taken.add(port)
        return port


def free_master_port(job_id: int, attempt: int, *, taken: set[int]) -> int:
    """The first port not in `taken` from the attempt's hashed start onwards, wrapping round
    the range; with every port taken (3,268 masters on one node), the hashed start."""
    start = MASTER_PORTS.index(master_port(job_id, attempt))
    count = len(MASTER_PORTS)
    ports = (MASTER_PORTS[(start + step) % count] for step in range(count))
    return next((port for port in ports if port not in taken), MASTER_PORTS[start])


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


def gangs_of(job_ids: Iterable[int]) -> dict[int, list[Task]]:
    """Each job's tasks with their nodes, in one query: what its assignments need of the ranks
    beside the one sent (rank 0's address, the ranks sharing its node)."""
    gangs: dict[int, list[Task]] = {}
    for task in Task.objects.filter(job_id__in=list(job_ids)).select_related("node").order_by("job_id", "rank"):
        gangs.setdefault(task.job_id, []).append(task)
    return gangs


def local_ranks(task: Task, gang: Sequence[Task]) -> list[int]:
    """The ranks of `task`'s attempt placed on its node, itself included, in rank order."""
    return sorted({task.rank, *(t.rank for t in gang if t.node_id == task.node_id and t.attempt == task.attempt)})


def assignment_env(task: Task, *, job: Job, master_node: str, gang: Sequence[Task] | None = None) -> dict[str, str]:
    """The variables the agent sets for `task` (docs/task-environment.md): the user's `env`
    and `secret_env`, then mlqueue's own (which neither may override). `gang` is the job's
    tasks (gangs_of); read here when not given."""
    if gang is None:
        gang = gangs_of([job.pk]).get(job.pk, [task])
    local = local_ranks(task, gang)
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
        # LOCAL_RANK is 0 for every task (each is a torchrun "node" with its own GPUs): per-machine
        # work (one download per machine, say) goes by these instead.
        "MLQ_LOCAL_TASK": str(local.index(task.rank)),
        "MLQ_LOCAL_TASKS": str(len(local)),
        **child_env(job),
        "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in task.gpu_indices),
        "WORLD_SIZE": str(job.task_count),
        "RANK": str(task.rank),
        "NODE_RANK": str(task.rank),
        "LOCAL_RANK": "0",
        "MASTER_ADDR": master_node,
        "MASTER_PORT": str(attempt_master_port(job, task.attempt)),
    }
    # Without a checkpoint block these are unset, not empty (QA: int(os.environ.get(
    # "MLQ_CHECKPOINT_INTERVAL_S", "600")) raised, and an empty directory read as the work dir).
    return {name: value for name, value in env.items() if value or name not in CHECKPOINT_VARIABLES}
