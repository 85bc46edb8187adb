"""When a job that depends on others may start: its edges' conditions against how their jobs ended.

Each edge of `depends_on` carries a condition (Slurm's afterok / afternotok / afterany):

- `success`: the job it depends on SUCCEEDED;
- `failure`: the jobs it depends on with this condition have all ended, and at least one FAILED
  (for good: a failed job waiting for its retry has not ended). One such edge: it failed;
- `any`: the job ended, however it ended (SUCCEEDED, FAILED, CANCELLED, EARLY_STOPPED, SKIPPED).

A job is released when every condition holds, waits while one may still hold, and can never run
(`Status.NEVER`) once one cannot: a `success` edge whose job ended otherwise, or `failure` edges
all ended without a failure. A pipeline's `when: always` is `any`. Pure: the snapshot, the
leader's sweep, the explanation and the simulator share it.
"""

from dataclasses import dataclass
from enum import StrEnum


class Condition(StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"
    ANY = "any"


class Status(StrEnum):
    MET = "MET"
    WAITING = "WAITING"
    NEVER = "NEVER"


SUCCEEDED, FAILED = "SUCCEEDED", "FAILED"
# What a condition asks for, in the sentence that says why a job will never run.
ASKED = {Condition.SUCCESS: "its success", Condition.FAILURE: "its failure", Condition.ANY: "its end"}


@dataclass(frozen=True, slots=True)
class Edge:
    """One dependency: the job waited on, the condition, and how that job ended (None: not yet)."""

    job_id: int
    condition: Condition
    ended: str | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    status: Status
    # WAITING: the edges still to end, in job-id order; a `failure` edge is shown as `any`
    # once a failure among its siblings already holds (it only has to end).
    waiting: tuple[Edge, ...] = ()
    # NEVER: the edges that went the wrong way (one `success` edge, or every `failure` edge).
    broken: tuple[Edge, ...] = ()


def evaluate(edges: list[Edge] | tuple[Edge, ...]) -> Verdict:
    """The verdict for one job's edges, first rule that holds:
    1. a `success` edge ended otherwise -> NEVER (the lowest such job id);
    2. every `failure` edge ended and none FAILED -> NEVER;
    3. an edge not ended -> WAITING on those; 4. otherwise MET."""
    edges = sorted(edges, key=lambda e: e.job_id)
    wrong = [e for e in edges if e.condition == Condition.SUCCESS and e.ended not in (None, SUCCEEDED)]
    if wrong:
        return Verdict(Status.NEVER, broken=(wrong[0],))
    on_failure = [e for e in edges if e.condition == Condition.FAILURE]
    failed = any(e.ended == FAILED for e in on_failure)
    if on_failure and not failed and all(e.ended is not None for e in on_failure):
        return Verdict(Status.NEVER, broken=tuple(on_failure))
    waiting = tuple(
        Edge(e.job_id, Condition.ANY) if failed and e.condition == Condition.FAILURE else e
        for e in edges
        if e.ended is None
    )
    return Verdict(Status.WAITING, waiting=waiting) if waiting else Verdict(Status.MET)


def never_message(broken: tuple[Edge, ...], *, label=None, noun: str = "job") -> str:
    """Why a job will never run, naming what it depended on and how that ended:
    "dependency 13 ended SUCCEEDED; this job ran only on its failure". `label` names a job id
    otherwise (a pipeline's "step train (job 13)")."""
    name = label or (lambda job_id: f"dependency {job_id}")
    if len(broken) == 1:
        edge = broken[0]
        return f"{name(edge.job_id)} ended {edge.ended}; this {noun} ran only on {ASKED[edge.condition]}"
    ends = ", ".join(f"{name(e.job_id)} ended {e.ended}" for e in broken)
    return f"{ends}; this {noun} ran only on a failure among them"


def waiting_message(waiting: tuple[Edge, ...]) -> str:
    """The pending reason while it waits: "waiting for job 12 to succeed and job 13 to fail"."""
    parts = []
    for condition, verb in ((Condition.SUCCESS, "succeed"), (Condition.FAILURE, "fail"), (Condition.ANY, "end")):
        ids = [e.job_id for e in waiting if e.condition == condition]
        if not ids:
            continue
        noun = "job" if len(ids) == 1 else "jobs"
        if condition == Condition.FAILURE and len(ids) > 1:
            verb = "end with at least one failure"
        parts.append(f"{noun} {', '.join(map(str, ids))} to {verb}")
    return "waiting for " + " and ".join(parts)
