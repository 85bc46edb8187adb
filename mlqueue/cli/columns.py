"""The columns of the jobs' tables: (title, how to read it from a result)."""

from mlqueue.cli.groups import group_cell

# After a start in the queue's table: its forecast is stale (`mlq queue` says so below the table).
STALE_MARK = "?"


def start_cell(start: str | None, entry) -> str | None:
    """A forecast start, marked when the forecast is no longer being refreshed: a person reading
    the table would otherwise take an old start for today's."""
    return f"{start}{STALE_MARK}" if start and entry.estimated_start_stale else start


JOB_COLUMNS = [
    ("ID", lambda job: job.id),
    ("NAME", lambda job: job.name),
    ("TEAM", lambda job: job.team),
    ("STATE", lambda job: job.state),
    ("PRI", lambda job: job.priority),
    ("GPUS", lambda job: f"{job.gpu_count} {job.gpu_type}".strip() if job.gpu_count else "-"),
]
JOB_WIDE = [
    ("OWNER", lambda job: job.owner),
    ("SUBMITTED", lambda job: job.submitted_at),
    ("STARTED", lambda job: job.started_at),
    ("FINISHED", lambda job: job.finished_at),
]
JOBS_COLUMNS = [*JOB_COLUMNS, ("GROUP", group_cell)]
QUEUE_COLUMNS = [
    ("POS", lambda entry: entry.position),
    *JOB_COLUMNS,
    ("LIKELY START", lambda entry: start_cell(entry.likely_start, entry)),
    ("REASON", lambda entry: entry.reason),
]
QUEUE_WIDE = [
    ("OWNER", lambda entry: entry.owner),
    ("LATEST START", lambda entry: start_cell(entry.estimated_start, entry)),
    ("RESERVED", lambda entry: ",".join(entry.reserved_nodes)),
]
TASK_COLUMNS = [
    ("RANK", lambda task: task.rank),
    ("STATE", lambda task: task.state),
    ("NODE", lambda task: task.node),
    ("ATTEMPT", lambda task: task.attempt),
    ("EXIT", lambda task: task.exit_code if task.exit_code is not None else task.exit_signal or None),
    ("STOPPED", lambda task: task.stop_reason or None),  # PEER_FAILED: another rank failed first
]
EVENT_COLUMNS = [
    ("AT", lambda event: event.created_at),
    ("KIND", lambda event: event.kind),
    ("BY", lambda event: event.actor),
    ("FROM", lambda event: event.from_state),
    ("TO", lambda event: event.to_state),
    ("MESSAGE", lambda event: event.message or event.reason),
]
