"""Replay the same trace slice with two checkouts of mlqueue side by side, and say whether
their summaries agree but for the wall time (a change meant to be faster, not different).

    python bench/replay_same.py --before /path/to/old/checkout --after . -- \\
        --trace var/philly-2017-09-10.csv --nodes 64 --quotas proportional --policy mlqueue \\
        --baseline none --from 2017-10-16 --to 2017-10-23

Both replays run at once (each `python -m bench.replay` in its checkout, the trace path read
from this directory), so on a shared machine both see the same load; the CPU seconds each
spent (user time, from `wait4`) are the figures to compare. Prints one JSON line:
`identical`, the fields that differ (before, after), and each side's CPU and wall seconds.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# What is allowed to differ: how long the replay took.
TIMING = ("wall_s", "jobs_per_min")


def parse_args(argv=None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="a checkout of the code before")
    parser.add_argument("--after", type=Path, default=Path("."), help="a checkout of the code after")
    parser.add_argument("replay", nargs=argparse.REMAINDER, help="-- then bench.replay's arguments")
    args = parser.parse_args(argv)
    replay = args.replay[1:] if args.replay[:1] == ["--"] else args.replay
    if not replay:
        parser.error("give bench.replay's arguments after --")
    for side in (args.before, args.after):
        if not (side / "bench" / "replay.py").is_file():
            parser.error(f"{side} is not a checkout of mlqueue (no bench/replay.py)")
    return args, [_absolute(arg) for arg in replay]


def _absolute(arg: str) -> str:
    """A path that exists here (the trace, a quotas file) is passed on as an absolute one."""
    return str(Path(arg).resolve()) if Path(arg).is_file() else arg


def start(checkout: Path, replay: list[str]) -> subprocess.Popen:
    """The replay in `checkout`, its output to files (read once it has ended)."""
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    process = subprocess.Popen([sys.executable, "-m", "bench.replay", *replay], cwd=checkout, stdout=out, stderr=err)
    process.out, process.err = out, err
    return process


def finish(processes: list[subprocess.Popen], started: float) -> list[tuple[dict, float, float]]:
    """Each replay's summary, CPU (user) seconds and wall seconds, as each ends; exits if
    one failed."""
    ended = {}
    while len(ended) < len(processes):
        pid, status, usage = os.wait4(-1, 0)
        ended[pid] = (os.waitstatus_to_exitcode(status), usage.ru_utime, time.perf_counter() - started)
    results = []
    for process in processes:
        code, cpu, wall = ended[process.pid]
        process.returncode = code
        out, err = _read(process.out), _read(process.err)
        if code != 0:
            print(f"replay_same: a replay failed ({code}): {err.strip()[-2000:]}", file=sys.stderr)
            raise SystemExit(1)
        results.append((json.loads(out.strip().splitlines()[-1]), cpu, wall))
    return results


def _read(stream) -> str:
    stream.seek(0)
    return stream.read()


def main(argv=None) -> dict:
    args, replay = parse_args(argv)
    started = time.perf_counter()
    processes = [start(args.before, replay), start(args.after, replay)]
    (before, before_cpu, before_wall), (after, after_cpu, after_wall) = finish(processes, started)
    differs = {
        key: [before.get(key), after.get(key)]
        for key in sorted(set(before) | set(after))
        if key not in TIMING and before.get(key) != after.get(key)
    }
    figures = {
        "identical": not differs,
        "differs": differs,
        "jobs": after.get("jobs"),
        "decisions": after.get("decisions"),
        "before_cpu_s": round(before_cpu, 1),
        "after_cpu_s": round(after_cpu, 1),
        "before_wall_s": round(before_wall, 1),
        "after_wall_s": round(after_wall, 1),
    }
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
