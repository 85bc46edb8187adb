"""Operations (issue 18): /metrics for CPU classes, nodes, the leader and the Celery backlog; a
requeued job's wait counted from its requeue; the Grafana dashboard and the Prometheus alert
rules in deploy/, checked with Debian's promtool (.ci/prometheus installs it) and against
the names a real scrape of /metrics exports."""

import json
import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import time_machine
import yaml
from django.utils import timezone
from prometheus_client import REGISTRY

from mlqueue.celery import app
from mlqueue.redis_client import redis_client
from scheduling.leader.worker import run_pass
from scheduling.models import Job, Node, SchedulerLease
from tests.integration.test_scheduler_pass import run_all_ranks, submit
from tests.nodes import cordon, heartbeat

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "mlqueue.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
ALERT_TESTS = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
CPU_JOB = {"gpu_count": 0, "gpu_type": "", "tasks": 4, "cpu_per_rank": 16, "memory_per_rank_gb": 64}


def scrape(client) -> list[str]:
    response = client.get("/metrics")
    assert response.status_code == 200
    return response.content.decode().splitlines()


def test_cpu_classes_nodes_and_demand_are_exported(api, leader, client):
    assert submit(api, "bob", team="production-ranking", resources=CPU_JOB)
    cordon(Node.objects.filter(name="z1-r1-h100-01"))
    run_pass(epoch=leader)
    submit(api, "bob", client_job_id="waits", team="production-ranking", resources={**CPU_JOB, "tasks": 24})
    submit(api, client_job_id="gpus", resources={"gpu_count": 64})

    lines = scrape(client)
    # The demo fleet's 8 CPU nodes of 96 CPUs: 4 ranks of 16 hold 64.
    assert 'mlqueue_cpus{resource_class="cpu",state="used"} 64.0' in lines
    assert 'mlqueue_cpus{resource_class="cpu",state="free"} 704.0' in lines
    assert 'mlqueue_pending_units{resource_class="cpu"} 384.0' in lines
    assert 'mlqueue_pending_units{resource_class="gpu:H100"} 64.0' in lines
    assert 'mlqueue_nodes{resource_class="cpu",state="ready"} 8.0' in lines
    assert 'mlqueue_nodes{resource_class="gpu:H100",state="ready"} 15.0' in lines
    assert 'mlqueue_nodes{resource_class="gpu:H100",state="cordoned"} 1.0' in lines


def test_the_leader_gauge_follows_the_lease(demo, client):
    SchedulerLease.objects.filter(pk=1).update(epoch=4, renewed_at=timezone.now(), lease_seconds=10)
    assert "mlqueue_leader_up 1.0" in scrape(client)
    SchedulerLease.objects.filter(pk=1).update(renewed_at=timezone.now() - timedelta(seconds=11))
    lines = scrape(client)
    assert "mlqueue_leader_up 0.0" in lines and "mlqueue_leader_epoch 4.0" in lines


@pytest.fixture
def broker_queue(settings):
    """The Celery default queue on the test's Redis, emptied before and after."""
    assert settings.CELERY_BROKER_URL.startswith("redis://")
    client = redis_client(settings.CELERY_BROKER_URL)
    keys = client.keys(app.conf.task_default_queue + "*")
    if keys:
        client.delete(*keys)
    yield app.conf.task_default_queue
    keys = client.keys(app.conf.task_default_queue + "*")
    if keys:
        client.delete(*keys)


def test_the_celery_backlog_is_the_brokers_queue_length(demo, client, broker_queue):
    assert f'mlqueue_celery_queue_length{{queue="{broker_queue}"}} 0.0' in scrape(client)
    for priority in (None, 9):  # a message with a priority waits in a list of its own
        for _ in range(3):
            app.send_task("scheduling.tasks.fire_due_schedules", priority=priority)
    assert f'mlqueue_celery_queue_length{{queue="{broker_queue}"}} 6.0' in scrape(client)


def test_a_broker_that_does_not_answer_costs_the_scrape_only_its_backlog(demo, client, settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:9/0"  # the discard port: nothing listens
    lines = scrape(client)
    assert "# TYPE mlqueue_celery_queue_length gauge" in lines
    assert not any(line.startswith("mlqueue_celery_queue_length{") for line in lines)
    assert "mlqueue_leader_epoch 0.0" in lines  # the rest is served


START = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def wait_sum(team: str, priority: str) -> float:
    return REGISTRY.get_sample_value("mlqueue_queue_wait_seconds_sum", {"team": team, "priority": priority}) or 0.0


def test_a_requeued_jobs_wait_counts_from_its_requeue(api, logged_in):
    """Submitted at 09:00, run, failed at 10:00 and requeued then with a 30 s back-off: placed
    again at 10:01, it waited 60 s, not 61 minutes, in the histogram and on the queue page."""
    with time_machine.travel(START, tick=False) as clock:
        SchedulerLease.objects.filter(pk=1).update(epoch=5, renewed_at=timezone.now())
        heartbeat()
        job = submit(api, client_job_id="retried", priority="P3", resources={"gpu_count": 8})
        before = wait_sum("research-foundation-models", "P3")
        run_pass(epoch=5)
        run_all_ranks(job, exit_code=None)
        assert wait_sum("research-foundation-models", "P3") == before  # placed at once

        clock.move_to(START + timedelta(hours=1))
        heartbeat()
        run_all_ranks(Job.objects.get(pk=job.pk), exit_code=1)
        run_pass(epoch=5)  # the verdict: a retry after back-off
        job.refresh_from_db()
        assert job.state == "PENDING" and job.queued_at == START + timedelta(hours=1)
        clock.move_to(START + timedelta(hours=1, seconds=30))
        page = logged_in("alice").get("/queue/").content.decode()
        assert "waiting 30s" in page

        clock.move_to(START + timedelta(hours=1, minutes=1))
        heartbeat()
        run_pass(epoch=5)
        assert Job.objects.get(pk=job.pk).state == "ASSIGNED"
        assert wait_sum("research-foundation-models", "P3") - before == 60.0


# --- deploy/: the dashboard and the alert rules -------------------------------------------

PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless"}
PROMQL_KEYWORDS |= {"offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers that are not functions,
    keywords, label names (in braces or after by/without/on/ignoring), strings or durations."""
    expr = re.sub(r'"(?:\\.|[^"\\])*"', '""', expr)  # strings
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = set()
    for found in re.finditer(r"(?<![\w.$])([a-zA-Z_:][\w:]*)(\s*\()?", expr):
        name, call = found.group(1), found.group(2)
        if not call and name.lower() not in PROMQL_KEYWORDS:
            names.add(name)
    return names


def test_metric_names_are_read_from_promql():
    expr = (
        'histogram_quantile(0.95, sum by (le, priority) (rate(mlqueue_queue_wait_seconds_bucket{priority!="P0"}[30m])))'
        ' > 4 * 3600 or absent(mlqueue_leader_up) unless on (instance) max(up{job="x"}) offset 5m'
    )
    assert metric_names(expr) == {"mlqueue_queue_wait_seconds_bucket", "mlqueue_leader_up", "up"}


def dashboard_exprs() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel.get("targets", [])]


def alert_exprs() -> list[str]:
    return [rule["expr"] for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]


def exported_names(lines: list[str]) -> set[str]:
    """Every series name /metrics can serve, from its `# TYPE` lines (a labelled family with
    no sample yet still has one): a counter's `_total`, a histogram's `_bucket`, `_sum`, `_count`."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    names = set()
    for line in lines:
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names |= {name.removesuffix("_total") + suffix for suffix in suffixes.get(kind, ("",))}
    return names


def test_every_metric_the_dashboard_and_the_rules_read_is_exported(api, leader, client):
    submit(api)
    run_pass(epoch=leader)
    exported = exported_names(scrape(client))
    assert {"mlqueue_cpus", "mlqueue_leader_up", "mlqueue_queue_wait_seconds_bucket"} <= exported

    for source, exprs in (("dashboard", dashboard_exprs()), ("alerts", alert_exprs())):
        assert exprs, source
        for expr in exprs:
            unknown = metric_names(expr) - exported
            assert not unknown, f"{source}: {expr!r} reads {sorted(unknown)}, which /metrics does not export"


def test_the_dashboard_is_grafana_json_with_a_query_per_panel():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "mlqueue" and dashboard["templating"]["list"][0]["type"] == "datasource"
    panels = [panel for panel in dashboard["panels"] if panel["type"] != "row"]
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])
    for panel in panels:
        assert panel["targets"] and panel["datasource"]["uid"] == "${datasource}", panel["title"]


def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is missing: `bash .ci/prometheus` installs Debian's prometheus package"
    return found


def test_promtool_checks_the_alert_rules():
    result = subprocess.run([promtool(), "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_exprs())} rules found" in result.stdout


def test_promtool_runs_the_alert_rules_unit_tests():
    result = subprocess.run(
        [promtool(), "test", "rules", ALERT_TESTS.name],
        cwd=ALERT_TESTS.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_parses_every_dashboard_query(tmp_path):
    """Each query as a recording rule, Grafana's $__rate_interval as a plain range."""
    rules = [
        {"record": f"mlqueue:dashboard_query_{index}", "expr": expr.replace("$__rate_interval", "5m")}
        for index, expr in enumerate(dashboard_exprs())
    ]
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
