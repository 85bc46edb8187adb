"""The demo cluster `make demo` runs (README): two divisions, three teams, six users, 36 nodes.

Idempotent: what exists is left alone (a quota someone edited keeps its edit)."""

from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from scheduling.core.model import resource_class
from scheduling.models import Node
from scheduling.schedules import check_schedule_create, do_create_schedule
from teams.models import Membership, Quota, Role, Team
from teams.services import do_note_gpu_type

DEMO_PASSWORD = "demo"
ZONES = ("z1", "z2")


@dataclass(frozen=True)
class NodeKind:
    gpu_type: str
    gpus: int
    cpus: int
    memory_gb: int
    scratch_gb: int
    per_rack: int
    rack: str  # rack number within each zone
    labels: tuple[tuple[str, str], ...] = ()


# 16 x 8 H100, 8 x 8 A100, 4 x 8 L40S, 8 CPU nodes, split evenly over the two zones so that
# each zone has a rack that holds a 64-GPU H100 gang.
FLEET = (
    NodeKind("H100", 8, 192, 2048, 30_000, 8, "r1", (("ib", "ndr400"),)),
    NodeKind("A100", 8, 128, 1024, 15_000, 4, "r2", (("ib", "hdr200"),)),
    NodeKind("L40S", 8, 64, 512, 7_500, 2, "r3"),
    NodeKind("", 0, 96, 384, 2_000, 4, "r4"),
)

DIVISIONS = {"research": 0.4, "production": 0.6}
TEAMS = {
    # team: (division, {resource class: (guaranteed, borrowing limit)})
    "research-foundation-models": ("research", {"gpu:H100": (32, 64), "gpu:A100": (10, 16), "cpu": (150, 150)}),
    "research-vision": (
        "research",
        {"gpu:H100": (16, 32), "gpu:A100": (15, 16), "gpu:L40S": (12, 16), "cpu": (150, 150)},
    ),
    "production-ranking": (
        "production",
        {"gpu:H100": (77, 32), "gpu:A100": (39, 16), "gpu:L40S": (20, 8), "cpu": (461, 150)},
    ),
}
USERS = {
    # user: (team, role)
    "rita": ("research-foundation-models", Role.LEAD),
    "alice": ("research-foundation-models", Role.MEMBER),
    "victor": ("research-vision", Role.MEMBER),
    "paul": ("production-ranking", Role.LEAD),
    "bob": ("production-ranking", Role.MEMBER),
}
ADMIN = "ops"


# `seed_demo --schedule` (make demo): a tiny 1-GPU run every 5 minutes, never two at once.
DEMO_SCHEDULE = {
    "name": "demo-every-5-minutes",
    "cron": "*/5 * * * *",
    "timezone": "Europe/Berlin",
    "concurrency": "forbid",
    "starting_deadline_minutes": 4,
    "spec": {
        "name": "demo-scheduled-probe",
        "team": "research-foundation-models",
        "command": ["python", "-c", "import time; print('a scheduled run'); time.sleep(20)"],
        "resources": {"gpu_count": 1, "gpu_type": "H100"},
        "priority": "P3",
        "max_runtime_hours": 1,
    },
}


def node_name(kind: NodeKind, zone: str, index: int) -> str:
    return f"{zone}-{kind.rack}-{(kind.gpu_type or 'cpu').lower()}-{index:02d}"


def capacity() -> dict[str, int]:
    totals = {}
    for kind in FLEET:
        rclass = resource_class(kind.gpu_type)
        amount = kind.gpus if kind.gpu_type else kind.cpus
        totals[rclass] = totals.get(rclass, 0) + amount * kind.per_rack * len(ZONES)
    return totals


class Command(BaseCommand):
    help = "Create the demo teams, users, quotas and nodes (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("--force", action="store_true", help="create the demo users even with DEBUG off")
        parser.add_argument(
            "--schedule",
            action="store_true",
            help="also a schedule that fires every 5 minutes (make demo's; left out by default so that tests and "
            "benchmarks on the demo data see no runs they did not submit)",
        )

    def handle(self, *args, force, schedule=False, **options):
        if not settings.DEBUG and not force:
            raise CommandError(
                f"refusing to create demo users with the password {DEMO_PASSWORD!r} while DEBUG is off; "
                "pass --force if this really is a throwaway cluster"
            )
        with transaction.atomic():
            created = self.seed_nodes() + self.seed_teams() + self.seed_users()
            if schedule:
                created += self.seed_schedule()
        self.stdout.write(f"seed_demo: {created} objects created" if created else "seed_demo: already seeded")

    def seed_nodes(self) -> int:
        wanted = {}
        for kind in FLEET:
            do_note_gpu_type(kind.gpu_type)
            for zone in ZONES:
                for index in range(1, kind.per_rack + 1):
                    wanted[node_name(kind, zone, index)] = dict(
                        zone=zone,
                        rack=f"{zone}-{kind.rack}",
                        gpu_type=kind.gpu_type,
                        gpu_count=kind.gpus,
                        cpu_count=kind.cpus,
                        memory_gb=kind.memory_gb,
                        scratch_disk_gb=kind.scratch_gb,
                        labels=dict(kind.labels),
                        state_reason="waiting for the node's agent to heartbeat",
                    )
        return create_missing(Node, "name", wanted)[1]

    def seed_teams(self) -> int:
        totals = capacity()
        divisions, created = create_missing(
            Team, "name", {name: {"description": f"{name} division"} for name in DIVISIONS}
        )
        teams, new = create_missing(
            Team, "name", {name: {"parent": divisions[division]} for name, (division, _) in TEAMS.items()}
        )
        quotas = {}
        for name, share in DIVISIONS.items():
            for rclass, total in totals.items():
                guaranteed = int(total * share) if name == "research" else total - int(total * 0.4)
                quotas[divisions[name].pk, rclass] = (guaranteed, total - guaranteed)
        for name, (_, limits) in TEAMS.items():
            for rclass, limit in limits.items():
                quotas[teams[name].pk, rclass] = limit
        had = set(
            Quota.objects.filter(team__in=[*divisions.values(), *teams.values()]).values_list("team", "resource_class")
        )
        missing = [
            Quota(team_id=team, resource_class=rclass, guaranteed=guaranteed, borrowing_limit=borrowing)
            for (team, rclass), (guaranteed, borrowing) in quotas.items()
            if (team, rclass) not in had
        ]
        Quota.objects.bulk_create(missing)
        return created + new + len(missing)

    def seed_users(self) -> int:
        """The demo users with DEMO_PASSWORD, a new user's password set as `set_password` sets it."""
        wanted = {username: {"email": f"{username}@example.com"} for username in USERS}
        wanted[ADMIN] = {"email": f"{ADMIN}@example.com", "is_staff": True, "is_superuser": True}
        users, created = create_missing(get_user_model(), "username", wanted, password=DEMO_PASSWORD)
        teams = Team.objects.in_bulk([team for team, _ in USERS.values()], field_name="name")
        had = set(Membership.objects.filter(user__in=users.values()).values_list("user", "team"))
        missing = [
            Membership(user=users[username], team=teams[team], role=role)
            for username, (team, role) in USERS.items()
            if (users[username].pk, teams[team].pk) not in had
        ]
        Membership.objects.bulk_create(missing)
        return created + len(missing)

    def seed_schedule(self) -> int:
        """DEMO_SCHEDULE, as alice creates it through the API (the same checks and the same row)."""
        alice = get_user_model().objects.get(username="alice")
        team, timing, spec = check_schedule_create(user=alice, data=DEMO_SCHEDULE)
        _, new = do_create_schedule(user=alice, team=team, timing=timing, spec=spec)
        return int(new)


def create_missing(model, field: str, wanted: dict[str, dict], *, password: str | None = None) -> tuple[dict, int]:
    """The rows of `model` whose unique `field` is each key of `wanted`: those that exist left as
    they are, the others created with `wanted[key]`'s values in one INSERT (a user with
    `password`). Two queries whatever the count. Returns (key -> row, how many were created)."""
    found = model.objects.in_bulk(list(wanted), field_name=field)
    new = [model(**{field: key}, **values) for key, values in wanted.items() if key not in found]
    for row in new if password is not None else ():
        row.set_password(password)
    model.objects.bulk_create(new)
    found.update({getattr(row, field): row for row in new})
    return found, len(new)
