"""The benchmarks run and print one JSON line each (their figures are read by people, in
BENCHMARKS.md, not asserted here: timings on a shared machine are not test material)."""
import json
import subprocess
import sys

import pytest

from tests.e2e.processes import ROOT

pytestmark = pytest.mark.e2e


def run_bench(*args: str) -> dict:
    result = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, result.stdout
    return json.loads(lines[0])


def test_cycle_bench_prints_its_figures():
    figures = run_bench("bench/cycle.py", "--nodes", "64", "--racks", "4", "--pending", "300", "--passes", "2")
    assert {"cycle_ms_cold", "cycle_ms_p50", "cycle_ms_p95", "placements_per_s", "steady_pending_tasks"} <= set(figures)
    assert figures["nodes"] == 64 and figures["cold_placements"] > 0


def test_latency_bench_measures_every_job():
    figures = run_bench("bench/latency.py", "--jobs", "20", "--database-url",
                        "postgres://postgres@127.0.0.1:5432/mlqueue_bench_smoke", "--redis-url",
                        "redis://127.0.0.1:6379/13")
    assert figures["jobs"] == 20 and 0 < figures["p50_ms"] <= figures["p99_ms"] <= figures["max_ms"]


def test_heartbeat_bench_measures_the_web_tier():
    figures = run_bench("bench/heartbeats.py", "--nodes", "50", "--seconds", "2", "--web", "1", "--clients", "1",
                        "--connections", "2", "--database-url",
                        "postgres://postgres@127.0.0.1:5432/mlqueue_bench_hb_smoke", "--redis-url",
                        "redis://127.0.0.1:6379/10")
    assert figures["heartbeats"] > 0 and figures["errors"] == 0


def test_queue_page_bench_renders_every_view():
    figures = run_bench("bench/queue_page.py", "--jobs", "300", "--renders", "2", "--database-url",
                        "postgres://postgres@127.0.0.1:5432/mlqueue_bench_queue_smoke")
    assert figures["jobs"] == 300 and all(value > 0 for key, value in figures.items() if key.endswith("_ms"))
