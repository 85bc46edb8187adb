"""Small builders for core tests: clusters of racks, pending and running jobs."""

from scheduling.core.model import (
    ClusterSnapshot,
    JobShape,
    Node,
    NodeState,
    PendingJob,
    PolicyConfig,
    Quota,
    RunningJob,
    TaskPlacement,
    Team,
    Topology,
)

NOW = 1_794_000_000.0  # 2026-11-07 21:20 UTC
HOUR = 3600.0


def rack(
    name: str,
    count: int,
    *,
    zone: str | None = None,
    gpu_type: str | None = "H100",
    gpus: int = 8,
    cpus: int = 96,
    memory_gb: int = 1024,
    labels=None,
    state=NodeState.READY,
) -> list[Node]:
    zone = zone or name.split("-")[0]
    return [
        Node(f"{name}-n{i}", zone, name, gpu_type, gpus if gpu_type else 0, cpus, memory_gb, labels or {}, state)
        for i in range(1, count + 1)
    ]


def cluster(*racks: list[Node]) -> tuple[Node, ...]:
    return tuple(node for r in racks for node in r)


def job(
    job_id: int,
    *,
    gpus: int = 8,
    per_task: int | None = None,
    team: str = "vision",
    priority: str = "P2",
    gpu_type: str | None = "H100",
    topology: Topology = Topology.NONE,
    age: float = 60.0,
    runtime: float = 4 * HOUR,
    cpus: int = 4,
    memory_gb: int = 32,
    selector=None,
    scratch_disk_gb: int = 0,
    image: bool = False,
    **extra,
) -> PendingJob:
    per_task = per_task or min(gpus, 8) or 0
    tasks = gpus // per_task if per_task else extra.pop("tasks", 1)
    shape = JobShape(gpu_type, tasks, per_task, cpus, memory_gb, selector or {}, topology, scratch_disk_gb, image)
    return PendingJob(job_id, team, priority, shape, NOW - age, runtime, **extra)


def running(
    job_id: int,
    nodes: list[str],
    *,
    gpus_per_node: int = 8,
    team: str = "vision",
    priority: str = "P2",
    age: float = HOUR,
    remaining: float = HOUR,
    first_gpu: int = 0,
    gpu_type: str | None = "H100",
    cpus: int = 4,
    memory_gb: int = 32,
    **extra,
) -> RunningJob:
    tasks = tuple(
        TaskPlacement(rank, node, tuple(range(first_gpu, first_gpu + gpus_per_node)), cpus, memory_gb)
        for rank, node in enumerate(nodes)
    )
    return RunningJob(job_id, team, priority, gpu_type, tasks, NOW - age, NOW + remaining, **extra)


def teams(**quotas: dict[str, tuple[int, int]]) -> tuple[Team, ...]:
    """teams(vision={"gpu:H100": (32, 32)}, ranking=...) -> flat teams (no divisions)."""
    return tuple(Team(name, None, {rc: Quota(g, b) for rc, (g, b) in q.items()}) for name, q in quotas.items())


def snapshot(nodes, *, pending=(), running_jobs=(), team_list=(), now: float = NOW, **config) -> ClusterSnapshot:
    return ClusterSnapshot(
        tuple(nodes), tuple(running_jobs), tuple(pending), tuple(team_list), now, PolicyConfig(**config)
    )


def placed_nodes(decisions, job_id: int) -> list[str]:
    placement = next(p for p in decisions.placements if p.job_id == job_id)
    return [t.node for t in placement.tasks]
