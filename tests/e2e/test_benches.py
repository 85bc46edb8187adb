"""The benchmarks run and print one JSON line each (their figures are read by people, in
BENCHMARKS.md, not asserted here: timings on a shared machine are not test material)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.e2e.processes import ROOT, scratch_database_url

pytestmark = pytest.mark.e2e
# The Redis databases the benchmarks' processes use (each bench starts from what its last run
# left), one per bench, apart from the suite's own REDIS_URL: a second suite on this machine
# sets its own.
LATENCY_REDIS_URL = os.environ.get("MLQ_TEST_LATENCY_REDIS_URL", "redis://127.0.0.1:6379/13")
HEARTBEATS_REDIS_URL = os.environ.get("MLQ_TEST_HEARTBEATS_REDIS_URL", "redis://127.0.0.1:6379/10")
# Six hours of the Philly trace (2017-10-04 00:00-06:00), kept here so the suite does not
# depend on the whole trace, which is not in the repository (BENCHMARKS.md, "Getting the trace").
SAMPLE_TRACE = ROOT / "tests" / "data" / "philly-2017-10-04-sample.csv"


BENCH_TIMEOUT_S = 300
# The benches that share HEARTBEATS_REDIS_URL run one after another, on one xdist worker
# (`--dist loadgroup`, Makefile): each starts from what the last left in it, not from what
# another is writing at the same moment.
shares_heartbeats_redis = pytest.mark.xdist_group("heartbeats-redis")


def run_bench(*args: str, timeout_s: float = BENCH_TIMEOUT_S) -> dict:
    """The bench's JSON line. A bench still running after `timeout_s` is sent SIGABRT, it and
    every process it started (its own session), on which faulthandler prints where every thread
    of each is; then they are killed, and the test fails with what they printed."""
    # As the bench runs outside the suite: with production's connection pool, not the test
    # process's MLQ_DB_POOL=0 (tests/settings.py), unless the bench sets its own.
    env = {**{k: v for k, v in os.environ.items() if k != "MLQ_DB_POOL"}, "PYTHONFAULTHANDLER": "1"}
    process = subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGABRT)
        time.sleep(5)  # the stacks written
        os.killpg(process.pid, signal.SIGKILL)  # a child still holding the pipes would keep them open
        stdout, stderr = process.communicate()
        pytest.fail(f"{args[0]} still running after {timeout_s} s; where it was:\n{stderr[-8000:]}")
    assert process.returncode == 0, stderr[-2000:]
    lines = stdout.strip().splitlines()
    assert len(lines) == 1, stdout
    return json.loads(lines[0])


def test_cycle_bench_prints_its_figures():
    figures = run_bench("bench/cycle.py", "--nodes", "64", "--racks", "4", "--pending", "300", "--passes", "2")
    assert {"cycle_ms_cold", "cycle_ms_p50", "cycle_ms_p95", "placements_per_s", "steady_pending_tasks"} <= set(figures)
    assert figures["nodes"] == 64 and figures["cold_placements"] > 0


def test_latency_bench_measures_every_job():
    figures = run_bench(
        "bench/latency.py",
        "--jobs",
        "20",
        "--database-url",
        scratch_database_url("bench_smoke"),
        "--redis-url",
        LATENCY_REDIS_URL,
    )
    assert figures["jobs"] == 20 and 0 < figures["p50_ms"] <= figures["p99_ms"] <= figures["max_ms"]


@shares_heartbeats_redis
def test_heartbeat_bench_measures_the_web_tier():
    figures = run_bench(
        "bench/heartbeats.py",
        "--nodes",
        "50",
        "--seconds",
        "2",
        "--web",
        "1",
        "--clients",
        "1",
        "--connections",
        "2",
        "--database-url",
        scratch_database_url("bench_hb_http_smoke"),
        "--redis-url",
        HEARTBEATS_REDIS_URL,
    )
    assert figures["heartbeats"] > 0 and figures["errors"] == 0


@shares_heartbeats_redis
def test_submit_bench_measures_the_web_tier_and_idempotency():
    figures = run_bench(
        "bench/submit.py",
        "--jobs",
        "20",
        "--clients",
        "2",
        "--load-processes",
        "1",
        "--web",
        "2",
        "--resubmits",
        "4",
        "--races",
        "2",
        "--database-url",
        scratch_database_url("bench_submit_smoke"),
        "--redis-url",
        HEARTBEATS_REDIS_URL,
    )
    assert figures["jobs"] == 20 and figures["errors"] == 0 and figures["web_processes"] == 3
    assert figures["idempotency_wrong_answers"] == 0 and figures["extra_rows"] == 0
    assert figures["job_rows"] == figures["distinct_client_job_ids"] == 2 * 2 + 20 + 2


@shares_heartbeats_redis
def test_heartbeat_bench_measures_socket_heartbeats():
    figures = run_bench(
        "bench/heartbeats.py",
        "--transport",
        "ws",
        "--nodes",
        "50",
        "--seconds",
        "2",
        "--rate",
        "50",
        "--web",
        "1",
        "--clients",
        "1",
        "--database-url",
        scratch_database_url("bench_hb_ws_smoke"),
        "--redis-url",
        HEARTBEATS_REDIS_URL,
    )
    assert figures["heartbeats"] > 0 and figures["errors"] == 0 and figures["mean_batch"] >= 1
    assert figures["open_sockets"] == 50 and figures["open_failed"] == 0 and figures["open_mean_batch"] >= 1
    assert figures["steady_heartbeats"] + figures["warmup_heartbeats"] == figures["heartbeats"]
    assert len(figures["p99_ms_by_second"]) == 2 and figures["batch_work_mean_ms"] > 0


@shares_heartbeats_redis
def test_heartbeat_app_bench_measures_the_application_alone():
    figures = run_bench(
        "bench/heartbeat_app.py",
        *("--batch", "4", "--waves", "3", "--rounds", "2"),
        *("--database-url", scratch_database_url("bench_hb_app_smoke"), "--redis-url", HEARTBEATS_REDIS_URL),
        timeout_s=120,  # a few seconds' work
    )
    assert figures["heartbeats"] == 4 * 3 * 2 and len(figures["rounds_us"]) == 2
    assert 0 < figures["event_loop_thread_cpu_us_per_heartbeat"] < figures["app_cpu_us_per_heartbeat"]


def test_queue_page_bench_renders_every_view():
    figures = run_bench(
        "bench/queue_page.py",
        "--jobs",
        "300",
        "--renders",
        "2",
        "--database-url",
        scratch_database_url("bench_queue_smoke"),
    )
    assert figures["jobs"] == 300 and all(value > 0 for key, value in figures.items() if key.endswith("_ms"))


def test_snapshot_read_bench_reads_both_ways():
    figures = run_bench(
        "bench/snapshot_read.py",
        "--pending",
        "200",
        "--running",
        "20",
        "--reads",
        "2",
        "--database-url",
        scratch_database_url("bench_snapshot_smoke"),
    )
    assert (figures["pending_jobs"], figures["running_jobs"]) == (200, 20)
    assert all(value > 0 for key, value in figures.items() if key.endswith("_ms"))


def test_nodes_page_bench_renders_every_view():
    figures = run_bench(
        "bench/nodes_page.py",
        "--nodes",
        "300",
        "--renders",
        "2",
        "--database-url",
        scratch_database_url("bench_nodes_smoke"),
    )
    assert figures["nodes"] == 300 and figures["running_tasks"] > 0 and figures["bulk_drain_rack_nodes"] > 0
    assert all(value > 0 for key, value in figures.items() if key.endswith("_ms"))


def test_forecast_weeks_bench_counts_every_row():
    figures = run_bench(
        "bench/forecast_weeks.py",
        "--days",
        "14",
        "--jobs-per-day",
        "100",
        "--runs",
        "1",
        "--database-url",
        scratch_database_url("bench_fcweeks_smoke"),
    )
    assert (figures["rows"], figures["weeks"]) == (1400, 2)
    assert all(value > 0 for key, value in figures.items() if key.endswith("_ms"))


def test_replay_bench_replays_the_trace_under_each_policy(tmp_path):
    quotas = tmp_path / "quotas.json"
    quotas.write_text('{"11cb48": 32, "6214e9": 16}')
    base = ("-m", "bench.replay", "--trace", str(SAMPLE_TRACE), "--nodes", "8")
    results = {
        policy: run_bench(*base, "--policy", policy, "--quotas", "none")
        for policy in ("fifo", "easy", "sjf", "mlqueue")
    }
    assert len({figures["jobs"] for figures in results.values()}) == 1
    for figures in results.values():
        assert figures["finished"] == figures["jobs"] > 0 and figures["gpus"] == 64
        assert 0 < figures["utilization"] <= 1 and 0 < figures["jain_fairness"] <= 1
        assert figures["p50_wait_s"] <= figures["p99_wait_s"] <= figures["max_wait_s"]
        assert set(figures["wait_by_size_s"]) == {"1", "2-8", "9-32", "33+"}
    # FIFO never starts a job before an older one; EASY backfills, so it waits less on average.
    assert results["easy"]["avg_wait_s"] <= results["fifo"]["avg_wait_s"]
    what_if = run_bench(*base, "--policy", "mlqueue", "--quotas", str(quotas))
    assert what_if["jobs"] == results["mlqueue"]["jobs"]


@pytest.mark.parametrize("processes, runs", [("1", "1"), ("2", "2")])
def test_forecast_bench_prints_its_figures(processes, runs):
    """In-process, and in the leader's kept workers (the second run finds them waiting)."""
    args = ("--nodes", "64", "--racks", "4", "--pending", "300", "--max-passes", "50")
    figures = run_bench("bench/forecast.py", *args, "--runs", runs, "--processes", processes)
    assert figures["jobs_forecast"] > 0 and figures["forecast_ms_p50"] > 0 and figures["forecast_ms_first"] > 0


@pytest.mark.parametrize(
    "args, message",
    [
        (("--trace", "no-such.csv"), "cannot read the trace"),
        (("--from", "October"), "--from"),
        (("--quotas", "missing.json"), "--quotas"),
        (("--load-scale", "0"), "--load-scale"),
    ],
)
def test_replay_bench_refuses_bad_options_with_a_message(args, message):
    base = {"--trace": str(SAMPLE_TRACE), "--nodes": "8", "--to": "2017-10-04 03:00:00"}
    base.update(dict(zip(args[::2], args[1::2], strict=True)))
    result = subprocess.run(
        [sys.executable, "-m", "bench.replay", *[x for pair in base.items() for x in pair]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


def test_usage_bench_loads_the_ledger_and_times_the_api():
    figures = run_bench(
        "bench/usage.py",
        "--days",
        "3",
        "--jobs-per-day",
        "200",
        "--requests",
        "2",
        "--database-url",
        scratch_database_url("bench_usage_smoke"),
    )
    assert (figures["jobs"], figures["attempts"]) == (600, 660)  # one in ten runs twice
    assert figures["rollup_rows"] > 0 and figures["rollup_build_s"] >= 0
    assert all(value > 0 for key, value in figures.items() if key.endswith("_ms"))


def test_what_if_bench_times_a_preview():
    figures = run_bench(
        "bench/whatif.py", "--jobs", "100", "--days", "1", "--database-url", scratch_database_url("bench_whatif_smoke")
    )
    assert (figures["jobs"], figures["state"]) == (100, "DONE")


def test_container_bench_prints_its_figures(podman_image):
    figures = run_bench("bench/containers.py", "--runs", "1")
    assert figures["runs"] == 1
    assert figures["container_start_to_output_ms_p50"] > 0 and figures["plain_sigterm_to_exit_ms_p50"] > 0
