"""Fuzz the REST API from its own OpenAPI schema and count server errors (5xx).

    python -m bench.fuzz [--cases 10000] [--database-url postgres://postgres@127.0.0.1:5432/mlqueue_fuzz]
                         [--redis-url redis://127.0.0.1:6379/13] [--seed N]
    python -m bench.fuzz --url https://mlqueue.example.com --token MEMBER_TOKEN [--admin-token ADMIN_TOKEN]

schemathesis generates requests for every operation in /api/schema/: valid ones and ones that
break the schema (wrong types, missing fields, odd strings, huge numbers), with path ids both
generated and real (an existing job, team and node), as a team member (alice) and as an admin
(ops); the agent API is called with the join token and a registered node's token.

In-process (the default), it creates a scratch database (dropped first if it exists), migrates
and seeds it, and calls the Django WSGI application directly: no server, no network. With
--url it calls a live server instead, as the tokens' users, and leaves the agent API out (a
node token is a credential of one machine). Prints one JSON line: cases run, by status class,
server errors and the first few failing requests, seconds. tests/integration/test_schema_fuzz.py
runs the same fuzzing, shorter, in the test suite.
"""

import argparse
import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AGENT_PREFIX = "/api/v1/agents/"
JOIN_TOKEN = "fuzz-join-token"
MAX_FAILURES_SHOWN = 5
MAX_ROUNDS = 10


@dataclass(frozen=True)
class Identity:
    """Who calls: the Authorization header, and the operations it is meant for (users call
    everything but the agent API; the agent identity calls only the agent API)."""

    label: str
    authorization: str
    agent: bool = False


@dataclass
class Figures:
    cases: int = 0
    by_status_class: dict = field(default_factory=dict)
    unsendable: int = 0  # requests the HTTP client itself refused to build (e.g. a header with a newline)
    failures: list = field(default_factory=list)

    def record(self, status: int, request: dict) -> None:
        self.cases += 1
        status_class = f"{status // 100}xx"
        self.by_status_class[status_class] = self.by_status_class.get(status_class, 0) + 1
        if status >= 500 and len(self.failures) < MAX_FAILURES_SHOWN:
            self.failures.append({**request, "status": status})

    @property
    def server_errors(self) -> int:
        return self.by_status_class.get("5xx", 0)

    def as_dict(self) -> dict:
        return {
            "cases": self.cases,
            "by_status_class": dict(sorted(self.by_status_class.items())),
            "server_errors": self.server_errors,
            "unsendable": self.unsendable,
            "first_failures": self.failures,
        }


def targets(schema, identities: list[Identity], real_paths: dict[str, dict]) -> list[tuple]:
    """(operation, identity, mode, path parameters or None) for every combination worth trying:
    each operation for the identities meant for it, valid and invalid requests, and where the
    path names an object, once with generated ids and once with real ones."""
    from schemathesis import GenerationMode

    found = []
    for result in schema.get_all_operations():
        operation = result.ok()
        for identity in identities:
            if operation.path.startswith(AGENT_PREFIX) != identity.agent:
                continue
            real = _real_parameters(operation.path, real_paths)
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                found.append((operation, identity, mode, None))
                if real:
                    found.append((operation, identity, mode, real))
    return found


def _real_parameters(path: str, real_paths: dict[str, dict]) -> dict | None:
    for prefix, parameters in real_paths.items():
        if path.startswith(prefix) and "{" in path:
            return parameters
    return None


def fuzz(
    schema,
    *,
    identities: list[Identity],
    real_paths: dict[str, dict],
    cases: int,
    send,
    derandomize: bool = False,
    seed: int | None = None,
) -> Figures:
    """Runs at least `cases` requests (if the operations allow that many distinct ones), spread
    evenly over the targets, in rounds: Hypothesis stops early on an operation with few
    possible requests, and the next round shares out what is left. `send(case, headers)`
    returns the response's status code."""
    plan = targets(schema, identities, real_paths)
    figures = Figures()
    for round_number in range(MAX_ROUNDS):
        before, remaining = figures.cases, cases - figures.cases
        if remaining <= 0:
            break
        per_target = -(-remaining // len(plan))
        round_seed = None if seed is None else seed + round_number
        for operation, identity, mode, path_parameters in plan:
            _fuzz_target(operation, identity, mode, path_parameters, per_target, send, figures, derandomize, round_seed)
        if figures.cases == before:
            break
    return figures


def _fuzz_target(operation, identity, mode, path_parameters, examples, send, figures, derandomize, seed) -> None:
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis.errors import HypothesisException

    headers = {"Authorization": identity.authorization}
    try:
        strategy = operation.as_strategy(generation_mode=mode, path_parameters=path_parameters)
    except Exception:  # noqa: BLE001 - e.g. nothing about this operation can be made invalid
        return

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=derandomize,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
    )
    @given(strategy)
    def run(case):
        try:
            status = send(case, headers)
        except Exception:  # noqa: BLE001 - the client could not send it; the server never saw it
            figures.unsendable += 1
            return
        figures.record(status, _describe(case, identity))

    if seed is not None and not derandomize:
        run = hypothesis_seed(seed)(run)
    try:
        run()
    except HypothesisException:
        pass  # e.g. an operation whose invalid requests cannot be generated


def _describe(case, identity: Identity) -> dict:
    from schemathesis.core import NotSet

    body = None if isinstance(case.body, NotSet) else case.body
    return {
        "as": identity.label,
        "method": case.method,
        "path": case.formatted_path,
        "query": repr(case.query)[:300],
        "body": repr(body)[:300],
    }


# --- in-process: a scratch database and the WSGI application --------------------------------


def in_process_send(app):
    def send(case, headers):
        return case.call(app=app, headers=headers).status_code

    return send


def setup_scratch(database_url: str, redis_url: str) -> None:
    from bench.latency import recreate_database

    os.environ.update(
        {
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "DJANGO_SETTINGS_MODULE": "mlqueue.settings",
            "DEBUG": "0",
            "SECRET_KEY": os.urandom(32).hex(),
            "SECURE_SSL_REDIRECT": "0",
            "MLQ_SUBMIT_RATE": "off",
            "MLQ_AGENT_JOIN_TOKEN": JOIN_TOKEN,
            "MLQ_DB_POOL": "0",
        }
    )
    recreate_database(database_url)
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("seed_demo", "--force", stdout=open(os.devnull, "w"))


def demo_world() -> tuple[list[Identity], dict[str, dict]]:
    """Tokens for alice, ops and a registered node, and the real objects paths may name:
    demo data must be loaded (seed_demo)."""
    from django.contrib.auth import get_user_model

    from agents.services import do_register_node
    from scheduling.models import Node
    from scheduling.services import check_job_submission, do_submit_job
    from teams.models import ApiToken

    users = get_user_model().objects
    alice = users.get(username="alice")
    team, spec = check_job_submission(user=alice, data={"team": "research-foundation-models", "command": ["true"]})
    job, _ = do_submit_job(user=alice, team=team, spec=spec)
    seeded_node = Node.objects.order_by("name").first().name
    node, node_token = do_register_node(
        name="fuzz-node",
        inventory={
            "zone": "z1",
            "rack": "z1-r1",
            "gpu_type": "H100",
            "gpu_count": 8,
            "cpu_count": 64,
            "memory_gb": 512,
        },
    )
    identities = [
        Identity(name, f"Bearer {ApiToken.issue(user=users.get(username=name))[1]}") for name in ("alice", "ops")
    ]
    identities.append(Identity("agent", f"Bearer {node_token}", agent=True))
    # A token of alice's that DELETE /api/v1/tokens/{id} may revoke with a real id, not the ones
    # the fuzzing identities send (revoking those would turn the rest of the run into 401s).
    decoy, _ = ApiToken.issue(user=alice, name="fuzz decoy")
    real_paths = {
        "/api/v1/tokens/": {"token_id": decoy.pk},
        "/api/v1/jobs/": {"job_id": job.pk},
        "/api/v1/teams/": {"name": "research-foundation-models"},
        "/api/v1/nodes/": {"name": seeded_node},
        AGENT_PREFIX: {"name": node.name},
    }
    return identities, real_paths


def load_schema_in_process(app, authorization: str):
    import schemathesis

    return schemathesis.openapi.from_wsgi("/api/schema/?format=json", app, headers={"Authorization": authorization})


class JoinTokenForRegister:
    """The agent identity registers with the join token, not its node token."""

    def __init__(self, send):
        self.send = send

    def __call__(self, case, headers):
        if case.operation.path.rstrip("/").endswith("/agents/register"):
            headers = {"Authorization": f"Bearer {JOIN_TOKEN}"}
        return self.send(case, headers)


def run_in_process(args) -> dict:
    setup_scratch(args.database_url, args.redis_url)
    from django.core.cache import cache

    from mlqueue.wsgi import application

    # After the WSGI application's django.setup(), which configures logging afresh: 4xx
    # answers are the point here, not news; a 5xx is still logged with its traceback.
    logging.getLogger("django").setLevel(logging.ERROR)
    cache.clear()
    identities, real_paths = demo_world()
    schema = load_schema_in_process(application, identities[0].authorization)
    started = time.monotonic()
    figures = fuzz(
        schema,
        identities=identities,
        real_paths=real_paths,
        cases=args.cases,
        seed=args.seed,
        send=JoinTokenForRegister(in_process_send(application)),
    )
    return {**figures.as_dict(), "seconds": round(time.monotonic() - started, 1), "target": "in-process WSGI"}


# --- a live server ----------------------------------------------------------------------------


def run_live(args) -> dict:
    import schemathesis

    member = Identity("member", f"Bearer {args.token}")
    identities = [member] + ([Identity("admin", f"Bearer {args.admin_token}")] if args.admin_token else [])
    schema = schemathesis.openapi.from_url(
        f"{args.url.rstrip('/')}/api/schema/?format=json", headers={"Authorization": member.authorization}
    )

    def send(case, headers):
        return case.call(base_url=args.url.rstrip("/"), headers=headers, timeout=30).status_code

    started = time.monotonic()
    figures = fuzz(schema, identities=identities, real_paths={}, cases=args.cases, send=send, seed=args.seed)
    return {**figures.as_dict(), "seconds": round(time.monotonic() - started, 1), "target": args.url}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=None, help="repeat a run (default: a new random one)")
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/mlqueue_fuzz")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/13")
    parser.add_argument("--url", help="a live server instead of the in-process application")
    parser.add_argument("--token", help="with --url: a member's API token")
    parser.add_argument("--admin-token", help="with --url: an admin's API token (optional)")
    args = parser.parse_args(argv)
    if args.cases < 1:
        parser.error("--cases must be at least 1")
    if args.url and not args.token:
        parser.error("--url needs --token")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    result = run_live(args) if args.url else run_in_process(args)
    print(json.dumps(result))
    return 1 if result["server_errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
