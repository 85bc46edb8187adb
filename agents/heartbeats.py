"""What a heartbeat does: note the node alive (in the cache), apply what the agent says its
tasks are doing, and answer with its lease, new assignments, signals and stale attempts to
kill. Postgres is only read here, except when a task or the node changes state."""
from datetime import timedelta

from django.conf import settings

from agents.models import Node
from scheduling import lifecycle, notify, reports
from scheduling.assignments import assignment_env, checkpoint_dir
from scheduling.models import FailureClass, SchedulerLease, Task, TaskState

ACTIVE = (TaskState.ASSIGNED, TaskState.RUNNING)


def apply_reported(node: Node, reported: list[dict], now) -> list[dict]:
    """Record exits and starts the agent reports; fail what the server thinks runs here but
    the agent does not run (it restarted and lost it); return the attempts the agent runs that
    the server no longer assigns to it (it must kill them)."""
    current = {(t.job_id, t.rank): t for t in Task.objects.filter(node=node, state__in=ACTIVE)}
    _fail_forgotten(current, reported, now)
    stale = []
    for item in reported:
        key, attempt = (item["job_id"], item["rank"]), item["attempt"]
        if item["state"] == "exited":
            reports.do_report_exited(job_id=key[0], rank=key[1], attempt=attempt, exit_code=item["exit_code"],
                                     signal=item["signal"], now=now)
            continue
        task = current.get(key)
        if task is None or task.attempt != attempt:
            stale.append({"job_id": key[0], "rank": key[1], "attempt": attempt})
        elif item["state"] == "running" and task.state == TaskState.ASSIGNED:
            reports.do_report_started(job_id=key[0], rank=key[1], attempt=attempt, now=now)
    return stale


def _fail_forgotten(current: dict, reported: list[dict], now) -> None:
    held = {(item["job_id"], item["rank"], item["attempt"]) for item in reported}
    for (job_id, rank), task in current.items():
        if task.state == TaskState.RUNNING and (job_id, rank, task.attempt) not in held:
            lifecycle.transition_task(task, to_state=TaskState.FAILED, attempt=task.attempt,
                                      actor_name=f"agent:{task.node_id}", reason="AGENT_LOST_TASK", now=now,
                                      message=f"rank {rank} is no longer running on its node (agent restarted?)",
                                      failure_class=FailureClass.INFRA)
            notify.wake_scheduler("lost task")


def reply(node: Node, reported: list[dict], now) -> dict:
    stale = apply_reported(node, reported, now)
    known = {(item["job_id"], item["rank"], item["attempt"]) for item in reported}
    tasks = list(Task.objects.filter(node=node, state__in=ACTIVE).select_related("job"))
    lease_s = settings.MLQ_AGENT_LEASE_S
    return {
        "lease_s": lease_s,
        "lease_until": (now + timedelta(seconds=lease_s)).isoformat(),
        "heartbeat_interval_s": settings.MLQ_HEARTBEAT_INTERVAL_S,
        "highest_epoch": SchedulerLease.objects.values_list("epoch", flat=True).first() or 0,
        "assignments": [assignment(t) for t in tasks
                        if t.state == TaskState.ASSIGNED and not t.stop_reason
                        and (t.job_id, t.rank, t.attempt) not in known],
        "signals": [{"job_id": t.job_id, "rank": t.rank, "attempt": t.attempt, "signal": t.stop_signal,
                     "reason": t.stop_reason} for t in tasks if t.stop_signal],
        "kill": stale,
    }


def assignment(task: Task) -> dict:
    job = task.job
    rank0 = task if task.rank == 0 else Task.objects.select_related("node").get(job_id=job.pk, rank=0)
    master = rank0.node.address or rank0.node.name if rank0.node else ""
    return {
        "job_id": job.pk, "rank": task.rank, "attempt": task.attempt, "epoch": task.epoch,
        "command": job.command, "image": job.image, "gpu_indices": task.gpu_indices,
        "cpus": job.cpu_per_rank, "memory_gb": job.memory_per_rank_gb,
        "grace_period_seconds": job.grace_period_seconds, "checkpoint_dir": checkpoint_dir(job),
        "env": assignment_env(task, job=job, master_node=master),
    }
