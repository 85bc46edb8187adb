"""Maintenance windows (docs/maintenance.md): an admin schedules "drain rack z1-r3 at 02:00
for 4 h"; `check_*` validates, `do_*` writes, `run_due` is what the firers call.

Exactly once per start and per end, whoever fires (the leader's pass each tick, Celery beat's
task as well): a firer lists the windows due (one indexed query), then claims each with a
conditional UPDATE (`WHERE id = .. AND state = SCHEDULED`, then `.. AND state = ACTIVE`); of two
firers only one updates the row, the other's UPDATE waits for the first's transaction and then
updates 0 rows: it does nothing. The drain or the uncordon runs in the claim's transaction, so
a firer that dies mid-way rolls back its claim with them. As for schedules, the claim in the
database, not the epoch, is what keeps a window from starting twice.

At its start a window drains its nodes gracefully (scheduling/nodes.py `do_drain`: SIGTERM, the
job's grace period, a requeue as a new attempt) except those an admin had cordoned or drained
already, and records which it drained. At its end it uncordons those alone, and only while
they still carry its reason: a node an admin cordoned for another reason meanwhile stays so, and
so does one a health fault cordoned (scheduling/nodes.py `do_health_cordon` takes the node over
from the window: a fault found during maintenance is not put back in service by its end).
"""

import math
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from rest_framework.exceptions import ValidationError

from mlqueue.errors import Conflict
from mlqueue.text import INVISIBLE, invisible_char
from scheduling import nodes as node_writes
from scheduling.core import model as core
from scheduling.models import AdminState, MaintenanceState, MaintenanceWindow, Node
from teams.models import AuditEvent, EventKind

OPEN = (MaintenanceState.SCHEDULED, MaintenanceState.ACTIVE)
LONGEST = timedelta(days=30)
SHORTEST = timedelta(hours=0.001)  # 3.6 s: every path (API, console, mlq) refuses less
AHEAD = timedelta(days=365)

ONE_TARGET = "give exactly one of rack, zone or names."
NO_NODE_IN = "no node is in {kind} {name}."
NO_SUCH_NODES = "no such node: {names}."
START_IN_PAST = "must be in the future (it is {now:%Y-%m-%d %H:%M:%S} UTC now)."
TOO_FAR = "must be within a year from now."
END_BEFORE_START = "must be after starts_at ({starts_at:%Y-%m-%d %H:%M} UTC)."
ONE_END = "give ends_at or duration_hours, not both."
NO_END = "give ends_at or duration_hours."
TOO_LONG = "a window lasts at most 30 days (720 h); {hours:.12g} h asked."
BAD_DURATION = "a number of hours from 0.001 to 720 ({hours:g} asked)."
TOO_SHORT = "a window lasts at least 0.001 h (3.6 s; {seconds:g} s asked)."
OVERLAPS = (
    "overlaps maintenance #{id} ({target}, {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC) on {count} of "
    "its nodes ({names}); windows on the same node may not overlap: change or cancel that one first."
)
NOT_SCHEDULED = "maintenance #{id} is {state}: only a scheduled window can be changed."
ALREADY_OVER = "maintenance #{id} is {state} already."
DUE = (
    "maintenance #{id} is due (it starts at {starts_at:%Y-%m-%d %H:%M} UTC): only a window yet to start"
    " can be changed; move its start, or cancel it."
)
NO_REASON = "say why: it is shown on the nodes and recorded in the audit log."
# A drained node shows "maintenance #<id>: <reason> (until <time>)" in a 300-character column.
REASON_LENGTH = 200
LONG_REASON = "at most 200 characters."


def _utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC)


def resolve_target(*, rack: str = "", zone: str = "", names: list[str] | None = None) -> tuple[str, list[str]]:
    """The window's target as a phrase and its node names: a rack, a zone, or named nodes.
    Raises ValidationError naming the field."""
    given = [kind for kind, value in (("rack", rack), ("zone", zone), ("names", names)) if value]
    if len(given) != 1:
        raise ValidationError({"rack": [ONE_TARGET]})
    if names:
        wanted = sorted(set(names))
        found = set(Node.objects.filter(name__in=wanted).values_list("name", flat=True))
        if unknown := [name for name in wanted if name not in found]:
            raise ValidationError({"names": [NO_SUCH_NODES.format(names=", ".join(unknown[:20]))]})
        return (f"node {wanted[0]}" if len(wanted) == 1 else f"{len(wanted)} nodes"), wanted
    kind, name = ("rack", rack) if rack else ("zone", zone)
    found = sorted(Node.objects.filter(**{kind: name}).values_list("name", flat=True))
    if not found:
        raise ValidationError({kind: [NO_NODE_IN.format(kind=kind, name=name)]})
    return f"{kind} {name}", found


def end_of(*, starts_at: datetime, ends_at: datetime | None, duration_hours: float | None, now) -> datetime:
    """`ends_at`, or `starts_at` plus `duration_hours`: exactly one of them. The start is
    checked first (a start years ahead would overflow the sum)."""
    check_start(starts_at, now=now)
    if ends_at is not None and duration_hours is not None:
        raise ValidationError({"ends_at": [ONE_END]})
    if ends_at is None and duration_hours is None:
        raise ValidationError({"ends_at": [NO_END]})
    if ends_at is not None:
        return ends_at
    hours = (SHORTEST.total_seconds() / 3600, LONGEST.total_seconds() / 3600)
    if not math.isfinite(duration_hours) or not hours[0] <= duration_hours <= hours[1]:
        raise ValidationError({"duration_hours": [BAD_DURATION.format(hours=duration_hours)]})
    return starts_at + timedelta(hours=duration_hours)


def check_reason(reason: str) -> None:
    if not reason.strip():
        raise ValidationError({"reason": [NO_REASON]})
    if len(reason) > REASON_LENGTH:
        raise ValidationError({"reason": [LONG_REASON]})
    if char := invisible_char(reason):  # the console's form, as the API's field refuses it
        raise ValidationError({"reason": [INVISIBLE.format(char=char)]})


def check_start(starts_at: datetime, *, now: datetime) -> None:
    if starts_at <= now:
        raise ValidationError({"starts_at": [START_IN_PAST.format(now=_utc(now))]})
    if starts_at - now > AHEAD:
        raise ValidationError({"starts_at": [TOO_FAR]})


def check_times(*, starts_at: datetime, ends_at: datetime, now: datetime) -> None:
    check_start(starts_at, now=now)
    if ends_at <= starts_at:
        raise ValidationError({"ends_at": [END_BEFORE_START.format(starts_at=_utc(starts_at))]})
    if ends_at - starts_at < SHORTEST:
        raise ValidationError({"ends_at": [TOO_SHORT.format(seconds=(ends_at - starts_at).total_seconds())]})
    if ends_at - starts_at > LONGEST:
        raise ValidationError({"ends_at": [TOO_LONG.format(hours=(ends_at - starts_at).total_seconds() / 3600)]})


def check_no_overlap(*, names: list[str], starts_at, ends_at, other_than: int | None = None) -> None:
    """No open window on any of `names` overlaps [starts_at, ends_at). The caller holds the
    nodes' row locks (`_lock_nodes`), so two overlapping windows cannot both pass."""
    wanted = set(names)
    clashing = MaintenanceWindow.objects.filter(state__in=OPEN, starts_at__lt=ends_at, ends_at__gt=starts_at)
    for window in clashing.exclude(pk=other_than).order_by("starts_at", "id"):
        shared = sorted(wanted & set(window.nodes))
        if shared:
            raise ValidationError(
                {
                    "starts_at": [
                        OVERLAPS.format(
                            id=window.pk,
                            target=window.target,
                            start=_utc(window.starts_at),
                            end=_utc(window.ends_at),
                            count=len(shared),
                            names=", ".join(shared[:5]) + (", ..." if len(shared) > 5 else ""),
                        )
                    ]
                }
            )


def _lock_nodes(names: list[str]) -> None:
    """Lock the nodes' rows, in id order: windows on the same nodes are checked one at a time."""
    list(Node.objects.select_for_update(no_key=True).filter(name__in=names).order_by("id").values_list("id", flat=True))


def _record(window: MaintenanceWindow, *, actor, reason: str, message: str, now) -> None:
    """One audit entry about the window, by the admin `actor` (None: the scheduler, a firer)."""
    AuditEvent.objects.create(
        kind=EventKind.MAINTENANCE,
        actor=actor,
        actor_name=actor.get_username() if actor else "scheduler",
        reason=reason,
        message=message,
        data={
            "window": window.pk,
            "target": window.target,
            "nodes": window.nodes,
            "starts_at": window.starts_at.isoformat(),
            "ends_at": window.ends_at.isoformat(),
        },
        created_at=now,
    )


def do_schedule_window(
    *,
    user,
    rack: str = "",
    zone: str = "",
    names=None,
    starts_at,
    ends_at=None,
    duration_hours=None,
    reason: str,
    now=None,
) -> MaintenanceWindow:
    now = now or timezone.now()
    check_reason(reason)
    target, found = resolve_target(rack=rack, zone=zone, names=names)
    ends_at = end_of(starts_at=starts_at, ends_at=ends_at, duration_hours=duration_hours, now=now)
    check_times(starts_at=starts_at, ends_at=ends_at, now=now)
    with transaction.atomic():
        _lock_nodes(found)
        check_no_overlap(names=found, starts_at=starts_at, ends_at=ends_at)
        window = MaintenanceWindow.objects.create(
            target=target,
            nodes=found,
            starts_at=starts_at,
            ends_at=ends_at,
            reason=reason,
            created_by=user,
            created_at=now,
        )
        _record(
            window,
            actor=user,
            reason="SCHEDULED",
            message=f"maintenance #{window.pk} scheduled: {_phrase(window)}: {reason}",
            now=now,
        )
    return window


def _phrase(window: MaintenanceWindow) -> str:
    """ "rack z1-r3, 2026-12-02 02:00 to 06:00 UTC"."""
    start, end = _utc(window.starts_at), _utc(window.ends_at)
    until = f"{end:%H:%M}" if end.date() == start.date() else f"{end:%Y-%m-%d %H:%M}"
    return f"{window.target}, {start:%Y-%m-%d %H:%M} to {until} UTC"


def do_change_window(*, window: MaintenanceWindow, user, changes: dict, now=None) -> MaintenanceWindow:
    """Move a scheduled window or change its reason: `changes` holds any of starts_at, ends_at,
    duration_hours (from the new start) and reason. Conflict once it has started."""
    now = now or timezone.now()
    with transaction.atomic():
        window = MaintenanceWindow.objects.select_for_update().get(pk=window.pk)
        if window.state != MaintenanceState.SCHEDULED:
            raise Conflict(NOT_SCHEDULED.format(id=window.pk, state=window.state))
        if window.starts_at <= now and "starts_at" not in changes:  # due: the next run_due starts it
            raise Conflict(DUE.format(id=window.pk, starts_at=_utc(window.starts_at)))
        starts_at = changes.get("starts_at", window.starts_at)
        ends_at = changes.get("ends_at")
        if ends_at is None and changes.get("duration_hours") is None:
            ends_at = starts_at + (window.ends_at - window.starts_at)  # moved, it keeps its length
        ends_at = end_of(starts_at=starts_at, ends_at=ends_at, duration_hours=changes.get("duration_hours"), now=now)
        reason = changes.get("reason", window.reason)
        if (starts_at, ends_at, reason) == (window.starts_at, window.ends_at, window.reason):
            return window  # nothing changes: nothing is written or audited
        check_times(starts_at=starts_at, ends_at=ends_at, now=now)
        _lock_nodes(window.nodes)
        check_no_overlap(names=window.nodes, starts_at=starts_at, ends_at=ends_at, other_than=window.pk)
        window.starts_at, window.ends_at, window.reason = starts_at, ends_at, reason
        # Conditional on the state still being SCHEDULED: the row lock above holds it so.
        window.save(update_fields=["starts_at", "ends_at", "reason"])
        _record(
            window,
            actor=user,
            reason="CHANGED",
            message=f"maintenance #{window.pk} changed: {_phrase(window)}: {window.reason}",
            now=now,
        )
    return window


CHANGED_SINCE = (
    "maintenance #{id} is {state} now, not {seen} as the page showed: nothing was changed. "
    "Reload the page, and end it from there if that is what you mean."
)


def do_cancel_window(*, window: MaintenanceWindow, user, now=None, seen: str | None = None) -> MaintenanceWindow:
    """Cancel a scheduled window; end an active one now (its nodes uncordoned as at its end).
    Conflict for one already done or cancelled, and for one no longer in the state `seen` (the
    state a page showed when it offered the button), if given."""
    now = now or timezone.now()
    with transaction.atomic():
        if seen is not None:
            current = MaintenanceWindow.objects.select_for_update().values_list("state", flat=True).get(pk=window.pk)
            if current != seen:
                raise Conflict(CHANGED_SINCE.format(id=window.pk, seen=seen, state=current))
        scheduled = MaintenanceWindow.objects.filter(pk=window.pk, state=MaintenanceState.SCHEDULED).update(
            state=MaintenanceState.CANCELLED, ended_at=now
        )
        ended = scheduled or _end(window.pk, now=now, to=MaintenanceState.CANCELLED, actor=user)
        window.refresh_from_db()
        if not ended:
            raise Conflict(ALREADY_OVER.format(id=window.pk, state=window.state))
        _record(
            window,
            actor=user,
            reason="CANCELLED",
            message=f"maintenance #{window.pk} cancelled{'' if scheduled else ' while active: nodes uncordoned'}",
            now=now,
        )
    return window


def run_due(*, now=None) -> tuple[list[int], list[int]]:
    """Start the windows whose start has come and end those whose end has: the firers' call.
    Returns the ids this call started and ended (a window another firer claimed is in neither)."""
    now = now or timezone.now()
    due = MaintenanceWindow.objects.filter(
        Q(state=MaintenanceState.SCHEDULED, starts_at__lte=now) | Q(state=MaintenanceState.ACTIVE, ends_at__lte=now)
    ).order_by("starts_at", "id")
    started, ended = [], []
    for window_id, state in due.values_list("id", "state"):
        if state == MaintenanceState.SCHEDULED and _start(window_id, now=now):
            started.append(window_id)
        elif state == MaintenanceState.ACTIVE and _end(window_id, now=now, to=MaintenanceState.DONE):
            ended.append(window_id)
    return started, ended


def _start(window_id: int, *, now) -> bool:
    """Claim a due window (SCHEDULED -> ACTIVE) and drain its nodes, in one transaction. A
    window whose end has passed too (the firers were down all along) starts and ends at once."""
    with transaction.atomic():
        if not MaintenanceWindow.objects.filter(pk=window_id, state=MaintenanceState.SCHEDULED).update(
            state=MaintenanceState.ACTIVE, started_at=now
        ):
            return False  # another firer claimed it, or an admin cancelled it
        window = MaintenanceWindow.objects.select_related("created_by").get(pk=window_id)
        actor_name = f"maintenance #{window.pk}"
        drained = []
        for node in Node.objects.select_for_update(no_key=True).filter(name__in=window.nodes).order_by("id"):
            if node.admin_state != AdminState.NONE:
                continue  # an admin's cordon or drain stands, and its end is the admin's to decide
            node_writes.do_drain(
                node=node, user=window.created_by, reason=window.drain_reason, now=now, actor_name=actor_name
            )
            drained.append(node.name)
        MaintenanceWindow.objects.filter(pk=window_id).update(drained=drained)
        window.drained = drained
        skipped = len(window.nodes) - len(drained)
        _record(
            window,
            actor=None,
            reason="STARTED",
            message=f"maintenance #{window.pk} started: drained {len(drained)} node(s)"
            + (f", {skipped} already cordoned or drained left as they were" if skipped else ""),
            now=now,
        )
    if window.ends_at <= now:
        _end(window_id, now=now, to=MaintenanceState.DONE)
    return True


def _end(window_id: int, *, now, to: str, actor=None) -> bool:
    """Claim an active window (ACTIVE -> `to`) and uncordon the nodes it still holds (it drained
    them, and they still carry its reason), in one transaction. A node a health fault cordoned
    during the window carries the fault's reason instead: it stays cordoned for an admin."""
    with transaction.atomic():
        if not MaintenanceWindow.objects.filter(pk=window_id, state=MaintenanceState.ACTIVE).update(
            state=to, ended_at=now
        ):
            return False
        window = MaintenanceWindow.objects.get(pk=window_id)
        actor_name = f"maintenance #{window.pk}"
        back, kept = [], []
        for node in Node.objects.select_for_update(no_key=True).filter(name__in=window.drained).order_by("id"):
            if not window.holds(node):
                kept.append(node.name)  # uncordoned already, or an admin's action or a fault since stands
                continue
            node_writes.do_uncordon(
                node=node, user=actor, reason=f"maintenance #{window.pk} over", now=now, actor_name=actor_name
            )
            back.append(node.name)
        _record(
            window,
            actor=actor,
            reason="ENDED",
            message=f"maintenance #{window.pk} ended: uncordoned {len(back)} node(s)"
            + (f"; left as they are: {', '.join(kept)}" if kept else ""),
            now=now,
        )
    return True


def load_windows(now) -> tuple[core.MaintenanceWindow, ...]:
    """The windows the scheduler must respect now: open, not over, and starting within the
    longest time limit a job may have (no job can run into a later one). A node an admin
    uncordoned while its window is on is back in service: the window no longer holds it."""
    horizon = now + timedelta(hours=settings.MLQ_MAX_RUNTIME_HOURS)
    rows = MaintenanceWindow.objects.filter(state__in=OPEN, starts_at__lt=horizon, ends_at__gt=now)
    fields = ("id", "target", "nodes", "state", "starts_at", "ends_at", "drained")
    rows = list(rows.values_list(*fields))
    released = _uncordoned({name for row in rows if row[3] == MaintenanceState.ACTIVE for name in row[2]})
    return tuple(
        core.MaintenanceWindow(
            pk,
            target,
            tuple(n for n in names if not (state == MaintenanceState.ACTIVE and n in released)),
            starts_at.timestamp(),
            ends_at.timestamp(),
            tuple(drained),
        )
        for pk, target, names, state, starts_at, ends_at, drained in rows
    )


def _uncordoned(names: set[str]) -> set[str]:
    """Those of `names` no admin state holds (one query, none for no names)."""
    if not names:
        return set()
    return set(Node.objects.filter(name__in=names, admin_state=AdminState.NONE).values_list("name", flat=True))


def open_windows(*, node_name: str | None = None) -> list[MaintenanceWindow]:
    """Scheduled and active windows, soonest first (on one node, if named): the console's list."""
    windows = list(MaintenanceWindow.objects.filter(state__in=OPEN).order_by("starts_at", "id"))
    if node_name is not None:
        # Picked here, not by a JSON containment lookup, which SQLite (`make demo`) lacks: a
        # node page was a 500 there. The open windows are few.
        windows = [window for window in windows if node_name in window.nodes]
    return windows
