"""What the fault campaign reads from the database under test: plain SQL on a connection of its
own per question, so a Postgres restart between two questions costs nothing but a reconnect.
The campaign never writes here: every change goes through the API, as a user's would."""

from dataclasses import dataclass

import psycopg

ACTIVE = ("ASSIGNED", "RUNNING")


@dataclass(frozen=True)
class GraceWindow:
    """A running job asked to stop, whose grace period has not run out yet."""

    job_id: int
    kill_at: float  # epoch seconds
    ignores_sigterm: bool


class Store:
    def __init__(self, url: str):
        self.url = url

    def rows(self, sql: str, params: tuple | dict = ()) -> list[tuple]:
        with psycopg.connect(self.url, connect_timeout=3, autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()

    def up(self) -> bool:
        try:
            return self.rows("SELECT 1") == [(1,)]
        except psycopg.Error:
            return False

    def leader_pid(self) -> int | None:
        """The pid in the lease's `host:pid` holder (the process may since have died)."""
        found = self.rows("SELECT holder FROM scheduling_schedulerlease WHERE id = 1 AND holder <> ''")
        return int(found[0][0].rsplit(":", 1)[1]) if found else None

    def ready_nodes(self) -> int:
        return self.rows("SELECT count(*) FROM agents_node WHERE state = 'READY'")[0][0]

    def active_tasks_on(self, nodes: list[str]) -> list[tuple[int, int, int]]:
        """(job, rank, attempt) of the tasks assigned to or running on these nodes now."""
        return self.rows(
            "SELECT t.job_id, t.rank, t.attempt FROM scheduling_task t JOIN agents_node n "
            "ON n.id = t.node_id WHERE n.name = ANY(%s) AND t.state = ANY(%s)",
            (nodes, list(ACTIVE)),
        )

    def grace_windows(self) -> list[GraceWindow]:
        """Jobs whose tasks got SIGTERM and will get SIGKILL later than a second from now."""
        found = self.rows(
            "SELECT t.job_id, extract(epoch FROM min(t.kill_at)), bool_or(j.env->>'IGNORE_SIGTERM' = '1') "
            "FROM scheduling_task t JOIN scheduling_job j ON j.id = t.job_id WHERE t.state = ANY(%s) "
            "AND t.stop_signal = 'TERM' AND t.kill_at > now() + interval '1 second' GROUP BY t.job_id",
            (list(ACTIVE),),
        )
        return [GraceWindow(job_id, float(kill_at), bool(ignores)) for job_id, kill_at, ignores in found]

    def free_gpus(self) -> int:
        """GPUs of READY nodes that no active task holds."""
        total = self.rows("SELECT coalesce(sum(gpu_count), 0) FROM agents_node WHERE state = 'READY'")[0][0]
        held = self.rows(
            "SELECT coalesce(sum(jsonb_array_length(gpu_indices)), 0) FROM scheduling_task WHERE state = ANY(%s)",
            (list(ACTIVE),),
        )[0][0]
        return max(0, total - held)

    def job_states(self, job_ids: list[int]) -> dict[int, str]:
        return dict(self.rows("SELECT id, state FROM scheduling_job WHERE id = ANY(%s)", (job_ids,)))
