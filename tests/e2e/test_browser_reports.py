"""The reports page in a real browser (issue 18): two weeks of ledger rows for the demo teams,
drawn as six charts with their tables; a lead sees their team, an admin every team and a team
filter that narrows the page. Screenshot: reports-page.png (docs/screenshots/ with
MLQ_SCREENSHOTS=1)."""

import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from scheduling import rollup
from scheduling.models import Price, UsageRecord
from teams.models import Membership
from tests.e2e.browser import log_in, screenshot_dir
from tests.e2e.test_browser import browser  # noqa: F401 (fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
CLASSES = [("gpu:H100", 8), ("gpu:A100", 8), ("gpu:L40S", 4), ("cpu", 0)]


def two_weeks_of_attempts(now: datetime) -> int:
    """Each member runs a few jobs a day; one in eight is preempted part way and runs again."""
    rng = random.Random(18)
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    people = list(Membership.objects.select_related("team", "user"))
    people.append(Membership(team=people[0].team, user=get_user_model().objects.get(username="ops")))
    rows, job_id = [], 0
    for day in range(14, -1, -1):
        for member in people:
            for _ in range(rng.randint(2, 5)):
                job_id += 1
                rclass, per_node = CLASSES[rng.randrange(len(CLASSES))]
                queued = today - timedelta(days=day, hours=rng.uniform(-20, 2))
                started = queued + timedelta(minutes=rng.expovariate(1 / 25))
                ended = started + timedelta(hours=rng.uniform(0.5, 9))
                if started >= now:
                    continue
                preempted = job_id % 8 == 0
                gpus = per_node * rng.choice((1, 1, 2)) if per_node else 0
                rows.append(
                    UsageRecord(
                        job_id=job_id,
                        attempt=1,
                        job_name=f"job-{job_id}",
                        team_id=member.team_id,
                        team_name=member.team.name,
                        owner_id=member.user_id,
                        owner_name=member.user.username,
                        resource_class=rclass,
                        priority=rng.choice(("P1", "P2", "P2", "P3")),
                        gpus=gpus,
                        cpus=16 if per_node else 32,
                        queued_at=queued,
                        started_at=started,
                        ended_at=None if ended > now else ended,
                        outcome="" if ended > now else "PREEMPTED" if preempted else "SUCCEEDED",
                        lost_gpu_hours=round(gpus * rng.uniform(0.1, 1.0), 2) if preempted and ended <= now else 0.0,
                        lost_cause="preemption" if preempted and ended <= now and gpus else "",
                    )
                )
    UsageRecord.objects.bulk_create(rows)
    rollup.do_rebuild()
    return len(rows)


def test_the_reports_page_draws_its_charts_with_the_numbers_beneath(live_server, demo, browser, tmp_path):  # noqa: F811
    now = datetime.now(UTC)
    assert two_weeks_of_attempts(now) > 100
    for rclass, price in (("gpu:H100", "3.20"), ("gpu:A100", "1.90"), ("gpu:L40S", "0.90"), ("cpu", "0")):
        Price.objects.create(
            resource_class=rclass,
            gpu_hour=Decimal(price),
            cpu_hour=Decimal("0.04"),
            effective_from=now - timedelta(days=30),
        )
    start = (now - timedelta(days=13)).date().isoformat()

    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    log_in(page, live_server.url, "ops")
    page.click("nav.top >> text=Reports")
    expect(page.locator("#report-range")).to_contain_text("every team")
    page.goto(f"{live_server.url}/reports/?from={start}&to={now.date().isoformat()}")
    for section in ("gpu-hours", "utilization", "waits", "lost", "top-users", "cost"):
        panel = page.locator(f"#report-{section}")
        expect(panel.locator("canvas")).to_be_visible()
        expect(panel.locator("tbody tr").first).to_be_visible()
    drawn = page.evaluate(
        "() => [...document.querySelectorAll('canvas[data-chart]')].filter(c => Chart.getChart(c)).length"
    )
    assert drawn == 6
    expect(page.locator("#report-gpu-hours tbody tr")).to_have_count(14)
    expect(page.locator("#report-cost tbody tr")).to_have_count(4)  # three teams and the total
    page.screenshot(path=str(screenshot_dir(tmp_path) / "reports-page.png"), full_page=True)

    page.select_option("select[name=team]", "production-ranking")
    page.click("#report-filters button[type=submit]")
    expect(page.locator("#report-range")).to_contain_text("team production-ranking")
    expect(page.locator("#report-cost tbody tr")).to_have_count(2)

    lead = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
    log_in(lead, live_server.url, "paul")
    lead.goto(f"{live_server.url}/reports/?from={start}")
    expect(lead.locator("#report-range")).to_contain_text("your teams (production-ranking)")
    teams = lead.locator("#report-cost tbody tr td:first-child").all_inner_texts()
    assert teams == ["production-ranking", "total"]
