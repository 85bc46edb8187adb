"""The columns of the jobs' tables: (title, how to read it from a result)."""

from mlqueue.cli.groups import group_cell

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
    ("LIKELY START", lambda entry: entry.likely_start),
    ("REASON", lambda entry: entry.reason),
]
QUEUE_WIDE = [
    ("OWNER", lambda entry: entry.owner),
    ("LATEST START", lambda entry: entry.estimated_start),
    ("RESERVED", lambda entry: ",".join(entry.reserved_nodes)),
]
TASK_COLUMNS = [
    ("RANK", lambda task: task.rank),
    ("STATE", lambda task: task.state),
    ("NODE", lambda task: task.node),
    ("ATTEMPT", lambda task: task.attempt),
    ("EXIT", lambda task: task.exit_code),
]
EVENT_COLUMNS = [
    ("AT", lambda event: event.created_at),
    ("KIND", lambda event: event.kind),
    ("BY", lambda event: event.actor),
    ("FROM", lambda event: event.from_state),
    ("TO", lambda event: event.to_state),
    ("MESSAGE", lambda event: event.message or event.reason),
]
