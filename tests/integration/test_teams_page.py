"""The teams page: quota bars and fair shares from running jobs, who sees which numbers, and
leads editing quotas in place (validated like the API, audited)."""

import re

import pytest
from django.utils.html import escape

from scheduling.leader.worker import run_pass
from scheduling.models import Job, SchedulerLease
from scheduling.usage import cluster_usage
from teams.api import NOT_A_LEAD, NOT_A_MEMBER
from teams.models import AuditEvent, Membership, Quota, Team
from teams.services import OVER_PARENT
from tests.conftest import make_spec
from tests.nodes import heartbeat

FM = "research-foundation-models"
EDIT = {"team": FM, "resource_class": "gpu:H100", "guaranteed": "34", "borrowing_limit": "64", "weight": "1.0"}


@pytest.fixture
def running(api):
    """On the demo fleet (128 H100, 64 A100, 768 CPU): alice's 40 H100 (32 guaranteed),
    victor's 16 A100 (15 guaranteed) and bob's 4 x 16 CPUs, all placed by one pass."""
    jobs = [
        ("alice", make_spec(client_job_id="h100", resources={"gpu_count": 40})),
        (
            "victor",
            make_spec(client_job_id="a100", team="research-vision", resources={"gpu_count": 16, "gpu_type": "A100"}),
        ),
        (
            "bob",
            make_spec(
                client_job_id="cpu",
                team="production-ranking",
                resources={"gpu_count": 0, "gpu_type": "", "tasks": 4, "cpu_per_rank": 16, "memory_per_rank_gb": 64},
            ),
        ),
    ]
    for username, spec in jobs:
        assert api(username).post("/api/v1/jobs", spec, format="json").status_code == 201
    SchedulerLease.objects.filter(pk=1).update(epoch=1)
    heartbeat()
    assert run_pass(epoch=1).placed == 3


def row(html: str, team: str, rclass: str) -> str | None:
    """The quota row's HTML, or None if the page has no such row."""
    found = re.search(rf'<tr id="quota-{team}-{rclass.replace(":", "-")}".*?</tr>', html, re.DOTALL)
    return found.group(0) if found else None


def cells(row_html: str) -> list[str]:
    return [
        re.sub(r"<[^>]+>|\s+", " ", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row_html, re.DOTALL)
    ]


def standing(usage, team: str, rclass: str) -> tuple[int, int, int, int]:
    row_ = usage.team(team).get(rclass)
    return row_.used, row_.guaranteed, row_.borrowed, row_.lent


def test_usage_counts_borrowed_and_lent_per_level(running):
    usage = cluster_usage()

    assert usage.capacity == {"gpu:H100": 128, "gpu:A100": 64, "gpu:L40S": 32, "cpu": 768}
    # Foundation models borrows 8 H100 and vision 1 A100; their peers' idle guarantees lend it,
    # split in proportion to what each leaves idle: 16 and 77 idle H100 lend 8 as 1 and 7 (each
    # read 8, 16 lent for 8 borrowed: QA); 10 and 39 idle A100 lend 1 as 0 and 1.
    assert standing(usage, FM, "gpu:H100") == (40, 32, 8, 0)
    assert standing(usage, "research-vision", "gpu:H100") == (0, 16, 0, 1)
    assert standing(usage, "production-ranking", "gpu:H100") == (0, 77, 0, 7)
    assert standing(usage, "research-vision", "gpu:A100") == (16, 15, 1, 0)
    assert standing(usage, FM, "gpu:A100") == (0, 10, 0, 0)
    assert standing(usage, "production-ranking", "gpu:A100") == (0, 39, 0, 1)
    for rclass in ("gpu:H100", "gpu:A100"):
        teams = [row for row in usage.teams if row.depth == 1 and row.get(rclass)]
        assert sum(row.get(rclass).lent for row in teams) == sum(row.get(rclass).borrowed for row in teams)
    assert standing(usage, "production-ranking", "cpu") == (64, 461, 0, 0)
    # The research division holds its teams' 40 H100 within its own 51: no division borrows.
    assert standing(usage, "research", "gpu:H100") == (40, 51, 0, 0)
    assert standing(usage, "production", "gpu:H100") == (0, 77, 0, 0)


def test_shares_follow_the_schedulers_formula(running):
    usage = cluster_usage()

    assert usage.team(FM).dominant_share == pytest.approx(40 / (32 + 0.01 * 128))
    assert usage.team("research-vision").dominant_share == pytest.approx(16 / (15 + 0.01 * 64))
    assert usage.team("production-ranking").dominant_share == pytest.approx(64 / (461 + 0.01 * 768))
    # research: H100 40 / (51 + 1.28) beats A100 16 / (25 + 0.64).
    assert usage.team("research").dominant_share == pytest.approx(40 / (51 + 1.28))
    assert usage.classes == ("gpu:H100", "gpu:A100", "gpu:L40S", "cpu")
    assert usage.team("research").shares == pytest.approx((40 / 52.28, 16 / 25.64, 0.0, 0.0))


def test_the_page_shows_the_tree_in_a_bounded_number_of_queries(running, logged_in, django_assert_max_num_queries):
    client = logged_in("ops")
    with django_assert_max_num_queries(15):
        response = client.get("/teams/")

    assert response.status_code == 200 and response.context["section"] == "teams"
    html = response.content.decode()
    order = [
        html.index(f'id="team-{name}"')
        for name in ("production", "production-ranking", "research", FM, "research-vision")
    ]
    assert order == sorted(order)
    assert cells(row(html, FM, "gpu:H100"))[2:7] == ["40 / 32 (+64)", "8", "0", "1", "1.202"]
    assert cells(row(html, "research-vision", "gpu:H100"))[2:5] == ["0 / 16 (+32)", "0", "1"]
    assert 'class="borrowed" style="left:33.3%;width:8.3%"' in row(html, FM, "gpu:H100")  # of 32 + 64
    fair = re.search(r'<tr id="share-research-vision">.*?</tr>', html, re.DOTALL).group(0)
    assert cells(fair) == ["research-vision", "0.000", "1.023", "0.000", "0.000", "1.023", "16 A100"]
    assert html.count('class="small edit-quota"') == sum(len(t.classes) for t in cluster_usage().teams)
    assert "members only" not in html


def test_everyone_signed_in_sees_every_teams_numbers_by_default(running, logged_in):
    """Quotas in the open (MLQ_QUOTAS_PUBLIC, on by default), as Slurm's sshare: bob, of
    production only, reads research's guarantees, use and shares, and edits nothing."""
    html = logged_in("bob").get("/teams/").content.decode()

    assert cells(row(html, FM, "gpu:H100"))[2:7] == ["40 / 32 (+64)", "8", "0", "1", "1.202"]
    assert cells(row(html, "research-vision", "gpu:A100"))[2:5] == ["16 / 15 (+16)", "1", "0"]
    fair = re.search(r'<tr id="share-research-vision">.*?</tr>', html, re.DOTALL).group(0)
    assert cells(fair) == ["research-vision", "0.000", "1.023", "0.000", "0.000", "1.023", "16 A100"]
    assert "members only" not in html
    assert "edit-quota" not in html
    # Aggregates only: no job, nor who runs it, is named.
    for job in Job.objects.all():
        assert f"/jobs/{job.pk}/" not in html and job.owner.username not in html.replace("bob", "")


def test_a_non_member_reads_a_row_by_default(demo, logged_in):
    response = logged_in("bob").get(f"/teams/?team={FM}&resource_class=gpu%3AH100")
    assert response.status_code == 200 and cells(response.content.decode())[2] == "0 / 32 (+64)"


def test_members_see_their_teams_numbers_read_only_when_quotas_are_private(running, logged_in, settings):
    settings.MLQ_QUOTAS_PUBLIC = False
    html = logged_in("alice").get("/teams/").content.decode()

    assert cells(row(html, FM, "gpu:H100"))[2] == "40 / 32 (+64)"
    assert "edit-quota" not in html
    assert row(html, "research-vision", "gpu:H100") is None  # not alice's team: listed, no numbers
    assert re.search(r'id="team-research-vision".*?members only', html, re.DOTALL)


def test_others_see_the_hierarchy_but_not_the_numbers_when_quotas_are_private(running, logged_in, settings):
    settings.MLQ_QUOTAS_PUBLIC = False
    html = logged_in("bob").get("/teams/").content.decode()

    for team in ("research", FM, "research-vision", "production"):
        assert f'id="team-{team}"' in html
        assert not re.search(f'id="quota-{team}-(gpu|cpu)', html)
        assert re.search(rf'<tr id="share-{team}">.*?members only.*?</tr>', html, re.DOTALL)
    assert cells(row(html, "production-ranking", "cpu"))[2] == "64 / 461 (+150)"


def test_admins_see_every_teams_numbers_when_quotas_are_private(running, logged_in, settings):
    settings.MLQ_QUOTAS_PUBLIC = False
    html = logged_in("ops").get("/teams/").content.decode()
    assert "members only" not in html and cells(row(html, "research-vision", "gpu:H100"))[2] == "0 / 16 (+32)"


def test_a_lead_gets_edit_controls_for_the_teams_it_leads_only(demo, logged_in):
    html = logged_in("rita").get("/teams/").content.decode()

    assert 'id="you-lead">research-foundation-models<' in html
    for rclass in ("gpu:H100", "gpu:A100", "cpu"):
        assert 'class="small edit-quota"' in row(html, FM, rclass)
    assert html.count("edit-quota") == 3
    assert 'class="small edit-quota"' not in row(html, "production-ranking", "gpu:H100")


def test_the_edit_control_swaps_in_a_form_and_cancel_swaps_it_back(demo, logged_in):
    client = logged_in("rita")
    url = f"/teams/?team={FM}&resource_class=gpu%3AH100"

    form = client.get(url + "&edit=1", HTTP_HX_REQUEST="true").content.decode()
    assert form.startswith(f'<tr id="quota-{FM}-gpu-H100" class="editing">')
    for name, value in (("guaranteed", "32"), ("borrowing_limit", "64"), ("weight", "1.0")):
        assert re.search(rf'name="{name}"[^>]*value="{re.escape(value)}"', form)
    assert 'name="reason"' in form and 'class="primary save-quota"' in form
    assert cells(client.get(url).content.decode())[2] == "0 / 32 (+64)"
    # Its weight is set from the team above (teams/quota_rules.py): shown, not editable, to its own lead.
    assert re.search(r'name="weight"[^>]*readonly', form)
    admin_form = logged_in("ops").get(url + "&edit=1", HTTP_HX_REQUEST="true").content.decode()
    assert 'name="weight"' in admin_form and not re.search(r'name="weight"[^>]*readonly', admin_form)


def test_a_member_cannot_open_or_post_an_edit(demo, logged_in):
    client = logged_in("alice")

    edit = client.get(f"/teams/?team={FM}&resource_class=gpu%3AH100&edit=1")
    assert edit.status_code == 403 and edit.content.decode() == NOT_A_LEAD.format(team=FM)
    response = client.post("/teams/", {**EDIT, "reason": "more please"})
    assert response.status_code == 403 and response.content.decode() == NOT_A_LEAD.format(team=FM)
    assert Quota.objects.get(team__name=FM, resource_class="gpu:H100").guaranteed == 32
    assert not AuditEvent.objects.filter(kind="QUOTA_CHANGED").exists()


def test_a_non_member_cannot_read_a_row_when_quotas_are_private(demo, logged_in, settings):
    settings.MLQ_QUOTAS_PUBLIC = False
    response = logged_in("bob").get(f"/teams/?team={FM}&resource_class=gpu%3AH100")
    assert response.status_code == 403 and response.content.decode() == NOT_A_MEMBER.format(team=FM)


def test_a_lead_saves_an_edit_with_a_reason_and_it_is_audited(running, logged_in):
    response = logged_in("rita").post("/teams/", {**EDIT, "reason": "llama run needs headroom"})

    assert response.status_code == 200 and response["HX-Trigger"] == "quotas-changed"
    html = response.content.decode()
    assert cells(html)[2:5] == ["40 / 34 (+64)", "6", "0"]
    assert "saved" in cells(html)[7]
    assert Quota.objects.get(team__name=FM, resource_class="gpu:H100").guaranteed == 34
    event = AuditEvent.objects.get(kind="QUOTA_CHANGED")
    assert (event.team.name, event.actor_name, event.data["reason"]) == (FM, "rita", "llama run needs headroom")
    assert event.message == f"{FM} gpu:H100: guaranteed 32 -> 34 (llama run needs headroom)"


def test_an_edit_without_a_reason_shows_the_serializers_error_and_saves_nothing(demo, logged_in):
    html = logged_in("rita").post("/teams/", {**EDIT, "reason": "  "}).content.decode()

    assert 'class="editing"' in html
    assert re.search(r'name="reason".*?<span class="error">This field may not be blank.</span>', html, re.DOTALL)
    assert re.search(r'name="guaranteed"[^>]*value="34"', html)  # what was typed stays
    assert Quota.objects.get(team__name=FM, resource_class="gpu:H100").guaranteed == 32
    assert not AuditEvent.objects.filter(kind="QUOTA_CHANGED").exists()


def test_an_invalid_value_is_named_beside_its_field(demo, logged_in):
    html = logged_in("rita").post("/teams/", {**EDIT, "weight": "0", "reason": "x"}).content.decode()
    assert re.search(
        r'name="weight".*?<span class="error">Ensure this value is greater than or equal to 0.01.</span>',
        html,
        re.DOTALL,
    )


def test_an_edit_over_the_parent_shows_the_tree_rule_inline(demo, logged_in):
    html = logged_in("rita").post("/teams/", {**EDIT, "guaranteed": "36", "reason": "too much"}).content.decode()

    message = OVER_PARENT.format(team=FM, total=52, rclass="gpu:H100", parent="research", parent_amount=51)
    assert f'<span class="error">{escape(message)}</span>' in html
    assert Quota.objects.get(team__name=FM, resource_class="gpu:H100").guaranteed == 32
    assert not AuditEvent.objects.filter(kind="QUOTA_CHANGED").exists()


def test_an_unchanged_save_is_refused(demo, logged_in):
    html = logged_in("rita").post("/teams/", {**EDIT, "guaranteed": "32", "reason": "nothing"}).content.decode()
    assert "these are the current values" in html
    assert not AuditEvent.objects.filter(kind="QUOTA_CHANGED").exists()


def test_a_division_lead_edits_its_teams(demo, logged_in, user):
    Membership.objects.create(user=user("victor"), team=Team.objects.get(name="research"), role="lead")

    html = logged_in("victor").get("/teams/").content.decode()
    assert "edit-quota" in row(html, FM, "gpu:H100") and "edit-quota" in row(html, "research", "gpu:H100")
    assert "edit-quota" not in (row(html, "production-ranking", "gpu:H100") or "")


def test_the_fair_share_part_refreshes_alone(running, logged_in):
    html = logged_in("ops").get("/teams/?part=fair-share").content.decode()
    assert html.startswith('<div class="panel" id="fair-share"')
    assert cells(re.search(rf'<tr id="share-{FM}">.*?</tr>', html, re.DOTALL).group(0))[-2:] == ["1.202", "40 H100"]


def test_the_page_needs_a_login(client, demo):
    response = client.get("/teams/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_the_fair_share_api_serves_every_teams_numbers_by_default(running, api):
    body = api("bob").get("/api/v1/fair-share").json()

    assert body["classes"] == ["gpu:H100", "gpu:A100", "gpu:L40S", "cpu"]
    assert body["capacity"] == {"gpu:H100": 128, "gpu:A100": 64, "gpu:L40S": 32, "cpu": 768}
    assert [team["name"] for team in body["teams"]] == [
        "production",
        "production-ranking",
        "research",
        FM,
        "research-vision",
    ]
    fm = next(team for team in body["teams"] if team["name"] == FM)
    assert fm["readable"] and fm["parent"] == "research"
    assert fm["dominant_share"] == pytest.approx(40 / (32 + 0.01 * 128))
    h100 = next(row for row in fm["classes"] if row["resource_class"] == "gpu:H100")
    assert {k: h100[k] for k in ("guaranteed", "borrowing_limit", "used", "borrowed", "lent")} == {
        "guaranteed": 32,
        "borrowing_limit": 64,
        "used": 40,
        "borrowed": 8,
        "lent": 0,
    }
    assert h100["share"] == pytest.approx(40 / 33.28)


def test_the_fair_share_api_hides_other_teams_numbers_when_quotas_are_private(running, api, settings):
    settings.MLQ_QUOTAS_PUBLIC = False
    teams = {team["name"]: team for team in api("bob").get("/api/v1/fair-share").json()["teams"]}

    assert teams[FM] == {"name": FM, "parent": "research", "readable": False, "dominant_share": None, "classes": None}
    ranking = {row["resource_class"]: row for row in teams["production-ranking"]["classes"]}
    assert teams["production-ranking"]["readable"] and ranking["cpu"]["used"] == 64
    admin = api("ops").get("/api/v1/fair-share").json()["teams"]
    assert all(team["readable"] for team in admin)


def test_the_fair_share_api_needs_a_signed_in_user(client, demo):
    assert client.get("/api/v1/fair-share").status_code == 401
