"""What-if previews of a quota change: the cluster's own history of a window (the usage
ledger, as a trace: scheduling/history.py) replayed in the simulator under the current quotas
and under one team's proposed quota (scheduling/sim/whatif.py), before anyone saves it.

`check_preview` validates (the same tree rules a save obeys, and the size bounds),
`do_start_preview` writes the QUEUED row and sends the Celery task after commit, and
`do_run_preview` (the task's body) claims the row, replays, writes its progress as it goes
and the figures at the end. Bounded three ways: the window's length, its number of jobs, and
a time limit checked at every simulated pass (past it the preview FAILS with a message).
"""

import logging
import time
from dataclasses import replace
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from rest_framework.exceptions import ValidationError

from scheduling import history
from scheduling.cluster import load_nodes, load_teams, policy_config
from scheduling.core.model import NodeState, Quota
from scheduling.models import PreviewState, QuotaPreview
from scheduling.sim.whatif import compare, with_quota
from teams.models import Membership, Role, Team
from teams.models import Quota as QuotaRow
from teams.quota_rules import check_capacity, check_field_rights
from teams.selectors import can_edit_quotas, is_site_admin, quota_readable_ids
from teams.services import check_quota_tree

log = logging.getLogger(__name__)

NOT_A_LEAD = "only leads of {team} (or of a team above it) and site admins may preview changes to its quotas."
# To a user who may preview no team's quotas, whatever the body names (docs/what-if.md: 403
# before the body is looked at; it was a 400 "team: This field is required").
LEADS_NO_TEAM = "only site admins and leads of a team (for it and the teams below it) may preview quota changes."
BACKWARDS = "must be after from ({start})."
TOO_LONG = "the window is {days:.1f} days; a preview replays at most {limit} days of history."
TOO_MANY_JOBS = "the window holds {jobs:,} jobs; a preview replays at most {limit:,}: choose a shorter window."
NO_JOBS = "no job submitted in this window ever started: there is no history to replay."
SAME_QUOTA = "these are the current values: change one to preview."
TIMED_OUT = "stopped after {limit} s, the preview's time limit (MLQ_WHATIF_TIME_LIMIT_S): choose a shorter window."
NO_NODES = "the cluster has no GPU nodes to replay on."
CRASHED = "the replay failed ({error}); the log has the details."
QUOTA_FIELDS = ("guaranteed", "borrowing_limit", "weight")
PROGRESS_EVERY_S = 0.5


class Stopped(Exception):
    """The preview must stop: past its time limit, or its row is no longer RUNNING."""


def current_quota(team: Team, rclass: str) -> dict:
    row = QuotaRow.objects.filter(team=team, resource_class=rclass).values(*QUOTA_FIELDS).first()
    return row or {"guaranteed": 0, "borrowing_limit": 0, "weight": 1.0}


def check_preview(
    *, team: Team, rclass: str, changes: dict, start: datetime, end: datetime, user=None
) -> tuple[dict, dict]:
    """(current, proposed) quota, or a ValidationError naming the field that is wrong."""
    if end <= start:
        raise ValidationError({"to": [BACKWARDS.format(start=start.isoformat())]})
    days = (end - start) / timedelta(days=1)
    if days > settings.MLQ_WHATIF_MAX_DAYS:
        raise ValidationError({"to": [TOO_LONG.format(days=days, limit=settings.MLQ_WHATIF_MAX_DAYS)]})
    current = current_quota(team, rclass)
    proposed = {**current, **changes}
    if proposed == current:
        raise ValidationError({"guaranteed": [SAME_QUOTA]})
    try:
        check_quota_tree(team=team, rclass=rclass, guaranteed=proposed["guaranteed"], user=user)
    except ValidationError as exc:  # named as the API names it (quotas.<class>.guaranteed): here a field of its own
        raise ValidationError({"guaranteed": next(iter(exc.detail.values()))}) from None
    _check_as_a_change(team=team, rclass=rclass, current=current, proposed=proposed, user=user)
    jobs = history.count_jobs(start, end)
    if jobs > settings.MLQ_WHATIF_MAX_JOBS:
        raise ValidationError({"from": [TOO_MANY_JOBS.format(jobs=jobs, limit=settings.MLQ_WHATIF_MAX_JOBS)]})
    if not jobs:
        raise ValidationError({"from": [NO_JOBS]})
    return current, proposed


def _check_as_a_change(*, team: Team, rclass: str, current: dict, proposed: dict, user) -> None:
    """The rules a change itself would meet (teams/quota_rules.py): who may set the weight, the
    cluster's size. A lead previewed her own team at weight 1000, which she may not set (QA)."""
    changed = {name: value for name, value in proposed.items() if current.get(name) != value}
    try:
        if user is not None:
            check_field_rights(user=user, team=team, rclass=rclass, changed=changed)
        check_capacity(team=team, rclass=rclass, before=current, changed=changed)
    except ValidationError as exc:  # quotas.<class>.<field> -> <field>, its status kept (403 for a right)
        raise type(exc)({path.rsplit(".", 1)[-1]: why for path, why in exc.detail.items()}) from None


def do_start_preview(*, user, team: Team, rclass: str, changes: dict, start: datetime, end: datetime) -> QuotaPreview:
    """The preview's row (QUEUED), and its Celery task once the row is committed; returns the
    row as it is then (already DONE where the task ran in the request)."""
    from scheduling.tasks import run_quota_preview

    current, proposed = check_preview(team=team, rclass=rclass, changes=changes, start=start, end=end, user=user)
    with transaction.atomic():
        preview = QuotaPreview.objects.create(
            requested_by=user,
            team=team,
            resource_class=rclass,
            current=current,
            proposed=proposed,
            window_start=start,
            window_end=end,
        )
        transaction.on_commit(lambda: run_quota_preview.delay(preview.pk))
    # Without a broker (the embedded setup) the task ran as the row was committed: the row as it
    # is now, DONE with its figures as `user` may read them, not as it was created (QA: QUEUED).
    return preview_for(user, preview.pk) or preview


def may_preview_any(user) -> bool:
    """Whether `user` may preview some team's quotas: an admin, or a lead of a team."""
    return is_site_admin(user) or Membership.objects.filter(user=user, role=Role.LEAD).exists()


def preview_for(user, preview_id: int) -> QuotaPreview | None:
    """The preview, if `user` may see it: who asked, and whoever may change the team's quotas."""
    preview = QuotaPreview.objects.select_related("team", "team__parent").filter(pk=preview_id).first()
    if preview is None or not (preview.requested_by_id == user.pk or can_edit_quotas(user, preview.team)):
        return None
    if preview.result:  # as read for `user` only; never saved
        preview.result = visible_result(user, preview.result)
    return preview


def visible_result(user, result: dict) -> dict:
    """The replay's figures as `user` may read them: the cluster's, and each team's row only
    where they may read that team's numbers (`quota_readable_ids`: every team while quotas are
    public, as the teams page shows every team's use and share; else their own teams and those
    below, and admins every team). Rows left out are counted in `teams_hidden`: every
    team is replayed (the proposal moves them all), but where quotas are private a lead sees
    no other team's waits through a preview."""
    readable = quota_readable_ids(user)
    if readable is None or "teams" not in result:
        return {**result, "teams_hidden": 0}
    names = set(Team.objects.filter(pk__in=readable).values_list("name", flat=True))
    rows = [row for row in result["teams"] if row["team"] in names]
    return {**result, "teams": rows, "teams_hidden": len(result["teams"]) - len(rows)}


def do_run_preview(*, preview_id: int, clock=None) -> str | None:
    """Claim the preview and replay it; its final state, or None if another worker has it. A
    RUNNING row older than the time limit was left by a worker that died: claimed again.
    `clock`: the time limit's (time.monotonic)."""
    now = timezone.now()
    stale = now - timedelta(seconds=settings.MLQ_WHATIF_TIME_LIMIT_S + 60)
    claimable = Q(state=PreviewState.QUEUED) | Q(state=PreviewState.RUNNING, started_at__lt=stale)
    if not QuotaPreview.objects.filter(claimable, pk=preview_id).update(state=PreviewState.RUNNING, started_at=now):
        return None
    preview = QuotaPreview.objects.select_related("team").get(pk=preview_id)
    try:
        result = replay_preview(preview, Progress(preview_id, clock))
    except Stopped as exc:
        return _finish(preview_id, PreviewState.FAILED, message=str(exc))
    except Exception as exc:
        log.exception("what-if preview %s failed", preview_id)
        return _finish(preview_id, PreviewState.FAILED, message=CRASHED.format(error=type(exc).__name__))
    return _finish(preview_id, PreviewState.DONE, result=result, progress=1.0)


def replay_preview(preview: QuotaPreview, progress) -> dict:
    """Both replays' figures: the cluster's and each team's, current and proposed."""
    as_of = min(timezone.now(), preview.window_end)
    export = history.export_window(preview.window_start, preview.window_end, as_of=as_of)
    if not export.jobs:
        raise Stopped(NO_JOBS)
    # History is replayed on today's whole fleet, every node up: a node down now was not
    # necessarily down then, and one down then is no reason to plan quotas without it.
    nodes = [replace(n, state=NodeState.READY) for n in load_nodes()[0] if n.gpus]
    if not nodes:
        raise Stopped(NO_NODES)
    current = load_teams()
    quota = Quota(**preview.proposed)
    proposed = with_quota(current, team=preview.team.name, rclass=preview.resource_class, quota=quota)
    found = compare(nodes, current, proposed, export.jobs, policy=policy_config(), progress=progress)
    return {
        "jobs": len(export.jobs),
        "refused": found.refused,
        "skipped": dict(export.skipped),
        "cluster": {
            "current": _over_finished(found.current["cluster"]),
            "proposed": _over_finished(found.proposed["cluster"]),
        },
        "teams": [
            {
                "team": team,
                "current": _over_finished(found.current["teams"][team]),
                "proposed": _over_finished(found.proposed["teams"].get(team)),
            }
            for team in found.current["teams"]
        ],
    }


# Averages and percentiles over the jobs that finished: with none, there is no figure (the
# simulator's summary says 0.0, which read as "no wait at all" against the other side's).
OVER_FINISHED = ("avg_wait_s", "p50_wait_s", "p95_wait_s", "p99_wait_s", "max_wait_s", "avg_jct_s", "bounded_slowdown")


def _over_finished(figures: dict | None) -> dict | None:
    if not figures or figures.get("finished", 1):
        return figures
    return {**figures, **{name: None for name in OVER_FINISHED if name in figures}}


class Progress:
    """The replay's progress callback: writes it to the row at most every PROGRESS_EVERY_S,
    and stops the replay past the time limit or once the row is no longer RUNNING."""

    def __init__(self, preview_id: int, clock=None):
        self.preview_id, self.clock = preview_id, clock or time.monotonic
        self.deadline = self.clock() + settings.MLQ_WHATIF_TIME_LIMIT_S
        self.written = -PROGRESS_EVERY_S

    def __call__(self, fraction: float) -> None:
        now = self.clock()
        if now > self.deadline:
            raise Stopped(TIMED_OUT.format(limit=settings.MLQ_WHATIF_TIME_LIMIT_S))
        if now - self.written < PROGRESS_EVERY_S:
            return
        self.written = now
        rows = QuotaPreview.objects.filter(pk=self.preview_id, state=PreviewState.RUNNING)
        if not rows.update(progress=round(fraction, 3)):
            raise Stopped("the preview was stopped elsewhere.")


def _finish(preview_id: int, state: str, **fields) -> str:
    QuotaPreview.objects.filter(pk=preview_id, state=PreviewState.RUNNING).update(
        state=state, finished_at=timezone.now(), **fields
    )
    return state


def proposal_summary(preview: QuotaPreview) -> list[tuple[str, object, object]]:
    """(field, current, proposed) for the fields the proposal changes."""
    before, after = preview.current, preview.proposed
    return [(name, before[name], after[name]) for name in QUOTA_FIELDS if before[name] != after[name]]
