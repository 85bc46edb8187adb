"""The reports page: each chart's numbers in its table, scoped to the viewer's teams, on a
frozen clock; a bad range is a 400 naming the field."""

import re
from datetime import timedelta
from decimal import Decimal

import pytest
import time_machine
from django.contrib.auth import get_user_model

from scheduling.models import Node, Price
from teams.models import Quota, Team
from teams.services import do_update_quotas
from tests.integration.test_forecast_accuracy import forecast
from tests.integration.test_usage_api import NOW, RANKING, RFM, VISION, H, attempt, now  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db


@pytest.fixture
def history(demo, now):  # noqa: F811
    attempt(1, team=RFM, owner="alice", start=-27, end=-3)  # 8 H100 from 09:00 the 19th to 09:00 the 20th
    attempt(
        2,
        team=RFM,
        owner="rita",
        start=-4,
        end=-2,
        gpus=16,
        outcome="PREEMPTED",
        lost_gpu_hours=4.0,
        lost_cause="preemption",
    )
    attempt(3, team=RANKING, owner="bob", start=-2, rclass="gpu:A100", gpus=4, priority="P1")
    Price.objects.create(resource_class="gpu:H100", gpu_hour=Decimal("2"), effective_from=NOW - 100 * H)


def table(page: str, section: str) -> list[list[str]]:
    block = page.split(f'id="report-{section}"', 1)[1].split("</table>", 1)[0]
    body = block.split("<tbody>", 1)[1]
    return [re.findall(r"<td>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)]


def test_a_lead_sees_their_teams_numbers_under_each_chart(logged_in, history):
    page = logged_in("rita").get("/reports/", {"from": "2026-04-19", "to": "2026-04-20"}).content.decode()
    assert 'href="/reports/" class="active">Reports</a>' in page
    guarantee = Quota.objects.filter(team__name=RFM, resource_class__startswith="gpu:").values_list(
        "guaranteed", flat=True
    )
    assert sum(guarantee)
    # The day under way (NOW is 12:00) is owed its hours so far.
    owed = [[str(float(sum(guarantee) * 24))], [str(float(sum(guarantee) * 12))]]
    assert table(page, "gpu-hours") == [["2026-04-19", "120.0", *owed[0]], ["2026-04-20", "104.0", *owed[1]]]
    assert table(page, "waits") == [[RFM, "P2", "2", "30.0", "30.0"]]
    assert table(page, "lost") == [[RFM, "1", "4.0", "0.0", "0.0", "0.0", "0.0", "0.0", "0.0", "4.0"]]
    assert table(page, "top-users") == [
        ["alice", "192.0", "384.0", "384.0", "0.0"],
        ["rita", "32.0", "32.0", "64.0", "4.0"],
    ]
    assert table(page, "cost") == [[RFM, "224.0", "416.0", "448.0"], ["total", "224.0", "416.0", "448.0"]]
    assert RANKING not in page.split('id="report-range"', 1)[1]


def test_a_week_cut_by_the_range_is_owed_only_its_part(logged_in, history):
    """By week, the first week starts on a Wednesday and the last is under way: the guarantee
    line counts the hours of each inside the range (it was a whole week's each)."""
    page = logged_in("rita").get("/reports/", {"from": "2026-02-11", "to": "2026-04-20"}).content.decode()
    gpus = sum(
        Quota.objects.filter(team__name=RFM, resource_class__startswith="gpu:").values_list("guaranteed", flat=True)
    )
    rows = table(page, "gpu-hours")
    assert rows[0][0] == "2026-02-09" and rows[0][-1] == str(float(gpus * 5 * 24))  # Wednesday to Sunday
    assert rows[1][-1] == str(float(gpus * 7 * 24))
    assert rows[-1][0] == "2026-04-20" and rows[-1][-1] == str(float(gpus * 12))  # Monday until NOW, 12:00


def test_an_admin_sees_every_team_and_filters_by_one(logged_in, history):
    client = logged_in("ops")
    page = client.get("/reports/", {"from": "2026-04-19", "to": "2026-04-20"}).content.decode()
    assert [row[0] for row in table(page, "cost")] == [RANKING, RFM, "total"]
    assert table(page, "utilization")[1][0] == "2026-04-20"
    page = client.get("/reports/", {"from": "2026-04-19", "to": "2026-04-20", "team": RANKING}).content.decode()
    assert [row[0] for row in table(page, "cost")] == [RANKING, "total"]


@pytest.mark.parametrize(
    "params, message",
    [
        ({"from": "yesterday"}, "from: Enter a valid date."),
        ({"from": "2026-04-20", "to": "2026-04-01"}, "to: must not be before from."),
        ({"from": "2010-01-01", "to": "2026-04-01"}, "from: a report covers at most 1830 days."),
        ({"team": VISION}, "team: Select a valid choice."),
        ({"from": "9999-12-01", "to": "9999-12-31"}, "to: must be before the year 9000."),  # was a 500
        ({"to": "0001-01-05"}, "to: must be after 1970-01-01."),  # the default from went before the year 1: a 500
        ({"from": "1969-12-01", "to": "1970-03-01"}, "from: must be after 1970-01-01."),
    ],
)
def test_a_bad_range_or_team_is_a_400_naming_it(logged_in, history, params, message):
    response = logged_in("rita").get("/reports/", params)
    assert response.status_code == 400
    assert message in response.content.decode()


def test_the_forecasts_accuracy_by_week_for_the_viewers_teams(logged_in, history):
    """2026-04-20 is a Monday: one week. rita's team's job started 30 minutes after its first
    forecast's bound and 10 before its last one's; the other team's job is not hers to see."""
    started = NOW - 2 * H
    minute = timedelta(minutes=1)
    forecast(RFM, started, first=started - 30 * minute, last=started + 10 * minute)
    forecast(RANKING, started, first=started, last=started)
    page = logged_in("rita").get("/reports/", {"from": "2026-04-19", "to": "2026-04-20"}).content.decode()
    assert table(page, "forecast") == [
        ["2026-04-13", "0", "–", "–", "–", "–"],
        ["2026-04-20", "1", "30.0", "10.0", "0.0", "100.0"],
    ]
    page = logged_in("ops").get("/reports/", {"from": "2026-04-20", "to": "2026-04-20"}).content.decode()
    assert table(page, "forecast") == [["2026-04-20", "2", "15.0", "5.0", "50.0", "100.0"]]


def columns(page: str, section: str) -> list[str]:
    block = page.split(f'id="report-{section}"', 1)[1].split("</thead>", 1)[0]
    return re.findall(r"<th>(.*?)</th>", block)


def share(gpu_hours: float, rclass: str, hours: float) -> str:
    size = sum(Node.objects.filter(gpu_type=rclass.removeprefix("gpu:")).values_list("gpu_count", flat=True))
    return str(round(100 * gpu_hours / (size * hours), 1))


def test_a_lead_sees_her_teams_share_of_each_class_not_its_utilization(logged_in, history):
    """QA: H100 "utilization" for one day read 0.8 for an admin, 0.3 and 0.5 for two leads: a
    lead's was her teams' GPU-hours over the class's capacity, labelled utilization."""
    page = logged_in("rita").get("/reports/", {"from": "2026-04-19", "to": "2026-04-20"}).content.decode()
    section = page.split('id="report-utilization"', 1)[1].split("</table>", 1)[0]
    assert "Your teams&#x27; share of each resource class&#x27;s capacity, by day" in section
    assert "Utilization" not in section and "(all teams)" not in section
    h100 = columns(page, "utilization").index("gpu:H100 (%)")
    # The 19th: alice's 8 H100 from 09:00, 15 hours, of the whole day; her team is rita's.
    assert table(page, "utilization")[0][h100] == share(8 * 15, "gpu:H100", 24)

    admin = logged_in("ops")
    page = admin.get("/reports/", {"from": "2026-04-20", "to": "2026-04-20"}).content.decode()
    assert "Utilization by resource class, by day" in page
    a100 = columns(page, "utilization").index("gpu:A100 (%)")
    assert table(page, "utilization")[0][a100] == share(4 * 2, "gpu:A100", 12)  # bob's, every team's
    page = admin.get("/reports/", {"from": "2026-04-20", "to": "2026-04-20", "team": RFM}).content.decode()
    assert f"{RFM}&#x27;s share of each resource class&#x27;s capacity, by day" in page
    heads = columns(page, "utilization")
    [row] = table(page, "utilization")
    assert (row[heads.index("gpu:A100 (%)")], row[heads.index("gpu:A100 (all teams, %)")]) == (
        "0.0",
        share(8, "gpu:A100", 12),
    )


def test_the_guarantee_line_keeps_the_quota_in_force_each_day(logged_in, history):
    """QA: a quota changed today rewrote every past day's guarantee. RFM's H100 guarantee is cut
    by 8 at 18:00 on the 19th: that day owes the old one for 18 hours and the new one for 6."""
    quotas = dict(
        Quota.objects.filter(team__name=RFM, resource_class__startswith="gpu:").values_list(
            "resource_class", "guaranteed"
        )
    )
    others = sum(gpus for rclass, gpus in quotas.items() if rclass != "gpu:H100")
    old = quotas["gpu:H100"]
    assert old >= 8
    with time_machine.travel(NOW - 18 * H, tick=False):
        do_update_quotas(
            team=Team.objects.get(name=RFM),
            changes={"gpu:H100": {"guaranteed": old - 8}},
            user=get_user_model().objects.get(username="ops"),
            reason="lent to vision",
        )
    page = logged_in("rita").get("/reports/", {"from": "2026-04-18", "to": "2026-04-20"}).content.decode()
    owed = [row[-1] for row in table(page, "gpu-hours")]
    assert owed == [
        str(float((others + old) * 24)),  # the 18th: as it was
        str(float((others + old) * 18 + (others + old - 8) * 6)),
        str(float((others + old - 8) * 12)),  # up to NOW, 12:00
    ]
