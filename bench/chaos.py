"""The fault campaign: does mlqueue keep its promises while its own control plane fails?

    python bench/chaos.py [--minutes 15] [--seed N] [--bound S] [--short] [--keep]

It starts a whole mlqueue of its own on this machine (bench/chaos_stack.py: its own Postgres
and Redis, two web processes, two schedulers, a Celery worker, three agent processes running
twelve virtual 8-GPU nodes), runs a steady workload of checkpointing jobs that note every
step in a ledger (bench/chaos_workload.py), and injects faults at random, one at a time, each
recorded (bench/chaos_faults.py): the leader killed at a failpoint of its pass or frozen past
its lease; Postgres restarted or down; Redis restarted (its data lost) or down; the whole web
tier down; Celery killed inside a preemption's grace window; one agent cut off, frozen or
killed. Control-plane outages last less than the outage bound; agent faults last past it.

Then it stops the faults and the submits, lets the last jobs finish (bounded), and checks the
invariants from the ledger, the database and the agents' logs (bench/chaos_checks.py). It
prints a table (faults by kind, jobs, each invariant's count, the first violations) and ends
with one JSON line of every figure; the exit status is 1 if any invariant was violated (or a
fault could not be carried out).

`--short` is the test suite's version (tests/e2e/test_chaos.py): every fault kind once, in a
random order, on scaled-down clocks (a 12 s bound, 1 s heartbeats, 2-5 s outages), in about two
and a half minutes. The long campaign injects shuffled rounds of every kind for `--minutes`
(the first round always runs to its end: 17-20 minutes of faults with the defaults), with
30-120 s outages and a 150 s bound (RELIABILITY.md says why). Everything it started is killed
and its scratch directory removed at the end, on failure or Ctrl-C too (`--keep` keeps the
directory: logs, ledger, database files).
"""

import argparse
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

if not __package__:
    # Run as a script: make `bench` and the project importable from the repository root.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.chaos_checks import INVARIANTS, held_preemptions, verdict  # noqa: E402
from bench.chaos_evidence import Evidence, gather  # noqa: E402
from bench.chaos_faults import AGENT_FAULTS, FAULTS, Campaign, Fault  # noqa: E402
from bench.chaos_report import print_summary  # noqa: E402
from bench.chaos_services import wait_until  # noqa: E402
from bench.chaos_stack import Stack  # noqa: E402
from bench.chaos_timings import SHORT, Timings, long_timings  # noqa: E402
from bench.chaos_workload import Workload  # noqa: E402

SHOWN_VIOLATIONS = 10


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--minutes",
        type=float,
        default=15,
        help="how long to inject faults (the long campaign; its first round of every kind always runs to its end)",
    )
    parser.add_argument("--seed", type=int, default=None, help="the random seed (default: from the clock)")
    parser.add_argument("--bound", type=float, default=150, help="the outage bound in seconds (long campaign)")
    parser.add_argument("--short", action="store_true", help="each fault kind once, on scaled-down clocks")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory and print where it is")
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = int(time.time())
    if not args.short and args.bound <= long_timings(args.bound).outage_s[1]:
        parser.error(f"--bound must be above the longest outage ({long_timings(args.bound).outage_s[1]:g} s)")
    return args


def note(message: str) -> None:
    print(f"chaos {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def fault_plan(rng: random.Random, *, short: bool):
    """Shuffled rounds of every fault kind: one round when short, else as many as time allows."""
    while True:
        yield from rng.sample(sorted(FAULTS), len(FAULTS))
        if short:
            return


def expected_s(kind: str, timings: Timings) -> float:
    """About how long a fault of this kind lasts, at most."""
    if kind in AGENT_FAULTS:
        return timings.agent_fault_s
    if kind in ("postgres_down", "redis_down", "web_down"):
        return timings.outage_s[1]
    return timings.window_wait_s if kind == "celery_kill" else timings.failpoint_wait_s


@dataclass
class Injected:
    faults: list[Fault] = field(default_factory=list)
    revived: Counter = field(default_factory=Counter)  # process name -> restarts after it exited on its own
    errors: list[str] = field(default_factory=list)  # faults that could not be carried out, and why


def inject(campaign: Campaign, *, short: bool, deadline: float) -> Injected:
    """Faults one at a time, each followed by a recovery and a quiet gap. The first round of
    every kind always runs to its end; later ones only while the next fault fits before the
    deadline. A fault that cannot be carried out (no leader to kill, say) is recorded, undone,
    and the campaign goes on."""
    done = Injected()
    shortest = min(expected_s(kind, campaign.timings) for kind in FAULTS)
    for index, kind in enumerate(fault_plan(campaign.rng, short=short)):
        left = deadline - time.time()
        if index >= len(FAULTS) and left < shortest:
            break
        if index >= len(FAULTS) and expected_s(kind, campaign.timings) > left:
            continue  # a shorter kind may still fit in what is left
        try:
            fault = FAULTS[kind](campaign)
        except TimeoutError as exc:
            done.errors.append(f"{kind}: {exc}")
            note(f"{kind} could not be carried out: {exc}")
            campaign.stack.undo_faults()
            fault = Fault(kind, "", time.time(), time.time(), detail=f"not carried out: {exc}")
        else:
            done.faults.append(fault)
            note(f"{kind} on {fault.target}: {fault.detail}")
        done.revived.update(recover(campaign, fault))
        time.sleep(campaign.rng.uniform(*campaign.timings.gap_s))
    return done


def recover(campaign: Campaign, fault: Fault) -> list[str]:
    """Restart what died (other than what the fault itself restarted) and wait for the cluster
    to be whole: a leader, every node READY, the API answering. The quiet gap that follows
    lets every agent renew its lease before the next fault, so two outages never add up to
    one longer than the bound. Returns the names of what had died."""
    revived = campaign.stack.heal()
    try:
        campaign.stack.wait_ready(timeout=campaign.timings.bound_s + campaign.timings.margin_s + 30)
        wait_until(campaign.stack.api_answers, timeout=30, what="the API to answer")
    except TimeoutError as exc:
        fault.detail += f"; afterwards {exc}"
    revived += campaign.stack.heal()
    for name in revived:
        note(f"{name} had exited: started again")
    return revived


def settle(stack: Stack, workload: Workload, timings: Timings) -> None:
    """The last jobs get up to `settle_s` to finish."""
    stack.heal()
    accepted = list(workload.accepted().values())
    try:
        wait_until(
            lambda: set(stack.store.job_states(accepted).values()) <= {"SUCCEEDED"},
            timeout=timings.settle_s,
            what="the last jobs to finish",
            interval=1,
        )
    except TimeoutError as exc:
        note(str(exc))


OUTAGES = ("postgres_restart", "postgres_down", "redis_restart", "redis_down", "web_down")


def failed_submits_by_fault(faults: list[Fault], workload: Workload) -> dict[str, dict[str, int]]:
    """What the API answered to submits during each kind of fault (a 503, or a 500 page?)."""
    found: dict[str, Counter] = {}
    for at, status in workload.failures:
        fault = next((f for f in faults if f.covers(at, slack=2)), None)
        found.setdefault(fault.kind if fault else "no fault", Counter())[status] += 1
    return {kind: dict(counts) for kind, counts in sorted(found.items())}


def figures(
    args,
    timings: Timings,
    ev: Evidence,
    done: Injected,
    workload: Workload,
    violations: dict[str, list[str]],
    wall_s: float,
) -> dict:
    faults = done.faults
    origin = faults[0].start if faults else ev.read_at
    preemptions = [e for e in ev.events if e.kind == "STOP_REQUESTED" and e.reason == "PREEMPTED"]
    return {
        "seed": args.seed,
        "short": args.short,
        "minutes": None if args.short else args.minutes,
        "bound_s": timings.bound_s,
        "margin_s": timings.margin_s,
        "heartbeat_s": timings.heartbeat_s,
        "wall_s": round(wall_s, 1),
        "faults": dict(Counter(f.kind for f in faults)),
        "fault_log": [f.record(origin) for f in faults],
        "campaign_errors": done.errors,
        "jobs": job_figures(ev, workload),
        "celery_kills_in_grace_window": sum(f.kind == "celery_kill" and f.victim is not None for f in faults),
        "preemptions": len(preemptions),
        "preemptions_held_to_grace": len(held_preemptions(ev, faults, timings)),
        "restarts_spent": sum(job.restarts_used for job in ev.jobs.values()),
        "leader_takeovers": sum(e.kind == "LEADER" for e in ev.events),
        "nodes_lost": sum(e.kind == "NODE_STATE" and e.reason == "LOST" for e in ev.events),
        "longest_outage_s": round(max((f.end - f.start for f in faults if f.kind in OUTAGES), default=0), 1),
        "api_answers": {str(status): count for status, count in sorted(workload.answers.items(), key=str)},
        "failed_submits_by_fault": failed_submits_by_fault(faults, workload),
        "api_refusals": workload.refusals[:SHOWN_VIOLATIONS],
        "processes_restarted": dict(done.revived),
        "invariants": {name: len(violations[name]) for name in INVARIANTS},
        "violations": {name: found[:SHOWN_VIOLATIONS] for name, found in violations.items() if found},
    }


def job_figures(ev: Evidence, workload: Workload) -> dict[str, int]:
    states = Counter(job.state for job in ev.jobs.values())
    return {
        "submitted": len(workload.accepted()),
        "succeeded": states["SUCCEEDED"],
        "active": states["PENDING"] + states["ASSIGNED"] + states["RUNNING"],
        "never_accepted": len(workload.submissions) - len(workload.accepted()),
        "attempts_run": len(ev.spans),
    }


def campaign(args, workdir: Path) -> dict:
    timings = SHORT if args.short else long_timings(args.bound)
    rng, started = random.Random(args.seed), time.time()
    stack = Stack(workdir, timings)
    workload = None
    try:
        note(f"seed {args.seed}; starting the cluster in {workdir}")
        stack.start()
        workload = Workload(stack.web_ports, stack.tokens, stack.ledger, timings, random.Random(args.seed + 1))
        workload.start()
        time.sleep(timings.job_s[0])  # jobs running before the first fault
        done = inject(
            Campaign(stack, workload, timings, rng), short=args.short, deadline=time.time() + args.minutes * 60
        )
        workload.stop()
        note("faults and submits stopped; settling")
        settle(stack, workload, timings)
        ev = gather(stack.store, stack.ledger, [agent.output() for agent in stack.agents.values()], read_at=time.time())
        violations = verdict(ev, faults=done.faults, timings=timings, accepted=workload.accepted())
        return figures(args, timings, ev, done, workload, violations, time.time() - started)
    finally:
        if workload is not None:
            workload.stop()
        stack.stop()


def main(argv=None) -> int:
    args = parse_args(argv)
    # Cleanup runs in `finally`: on SIGTERM, and on Ctrl-C even when started from a shell that
    # had SIGINT ignored (a background job), which Python would otherwise keep ignoring.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    workdir = Path(tempfile.mkdtemp(prefix="mlq-chaos-"))
    os.chmod(workdir, 0o711)  # Postgres runs as its own user and must reach its directory
    try:
        result = campaign(args, workdir)
    finally:
        if args.keep:
            note(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print_summary(result)
    print(json.dumps(result))
    return 1 if any(result["invariants"].values()) or result["campaign_errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
