"""The apps import one another in one direction only (issue 14): walk every import of every
module (those inside functions too) and check each goes down the layers below, so no two apps
import each other and a change at the bottom never needs the top.

    project wiring   mlqueue.settings, urls, routing, asgi, wsgi, fastlane, submit_lane: puts the apps together
    agents           how machines join and talk to the control plane; the operator console
    notifications    webhooks and emails about jobs, told of their state changes by scheduling's signals
    scheduling       the cluster (nodes, jobs, tasks), the leader, the jobs API and pages
    teams            teams, roles, quotas, API tokens, the audit log
    shared           the rest of mlqueue/: errors, parsers, breaker, cache, text rules
    libraries        scheduling.core, scheduling.sim, agents.node, mlqueue.checkpoint, mlqueue.metrics_report,
                     mlqueue.client
                     and mlqueue.cli (the SDK and `mlq`): no Django,
                     importable from any layer, importing only each other

docs/architecture.md says where each kind of change goes."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APPS = ("mlqueue", "teams", "scheduling", "notifications", "agents")
LIBRARIES = (
    "scheduling.core",
    "scheduling.sim",
    "agents.node",
    "mlqueue.checkpoint",
    "mlqueue.metrics_report",
    "mlqueue.client",
    "mlqueue.cli",
)
WIRING = (
    "mlqueue.settings",
    "mlqueue.urls",
    "mlqueue.routing",
    "mlqueue.asgi",
    "mlqueue.wsgi",
    "mlqueue.fastlane",
    "mlqueue.submit_lane",
)
# Bottom to top: a module may import its own layer and those below it, never one above.
LAYERS = ("shared", "teams", "scheduling", "notifications", "agents", "wiring")


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def component(name: str) -> str:
    """The library or layer a first-party module belongs to."""
    for library in LIBRARIES:
        if _within(name, library):
            return library
    if any(_within(name, wiring) for wiring in WIRING):
        return "wiring"
    top = name.split(".")[0]
    return "shared" if top == "mlqueue" else top


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, source: str | None = None) -> set[str]:
    """Every first-party module `path` (or `source`, read as if it were there) names in an
    import statement, wherever it stands."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text() if source is None else source, str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from scheduling import lifecycle` imports the module scheduling.lifecycle;
            # `from scheduling.models import Job` imports scheduling.models.
            for alias in node.names:
                names.add(f"{base}.{alias.name}" if is_module(f"{base}.{alias.name}") else base)
    return {name for name in names if name.split(".")[0] in APPS}


def is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def first_party_modules() -> list[Path]:
    return sorted(path for app in APPS for path in (ROOT / app).rglob("*.py") if "migrations" not in path.parts)


def edges() -> list[tuple[str, str, str, str]]:
    """(module, what it imports, its component, that one's component) for imports across components."""
    found = []
    for path in first_party_modules():
        here = module_name(path)
        for name in imported(path):
            source, target = component(here), component(name)
            if source != target:
                found.append((here, name, source, target))
    return sorted(found)


def test_every_module_is_walked():
    walked = {module_name(path) for path in first_party_modules()}
    assert {
        "scheduling.leader.worker",
        "scheduling.web.api",
        "agents.api",
        "teams.models",
        "mlqueue.urls",
        "scheduling.core.scheduler",
        "agents.node.daemon",
    } <= walked
    assert len(walked) > 100


def test_libraries_import_only_libraries():
    wrong = [
        f"{module} imports {name}"
        for module, name, source, target in edges()
        if source in LIBRARIES and target not in LIBRARIES
    ]
    assert wrong == [], "a library (no Django) imports an app:\n" + "\n".join(wrong)


def test_apps_import_only_downward():
    upward = [
        f"{module} ({source}) imports {name} ({target})"
        for module, name, source, target in edges()
        if source in LAYERS and target in LAYERS and LAYERS.index(target) > LAYERS.index(source)
    ]
    assert upward == [], "an import goes up the layers (LAYERS in this file):\n" + "\n".join(upward)


@pytest.mark.parametrize(
    "source, expected",
    [
        ("from scheduling import lifecycle", {"scheduling.lifecycle"}),
        ("def f():\n    from agents.services import do_register_node", {"agents.services"}),
        ("import teams.models", {"teams.models"}),
        ("from . import fairshare", {"scheduling.core.fairshare"}),
        ("from .model import Node", {"scheduling.core.model"}),
        ("from mlqueue import checkpoint, errors", {"mlqueue.checkpoint", "mlqueue.errors"}),
        ("import json\nfrom django.db import models", set()),
    ],
)
def test_the_walk_sees_every_kind_of_import(source, expected):
    assert imported(ROOT / "scheduling" / "core" / "probe.py", source) == expected


def test_an_upward_import_is_caught():
    assert component("teams.models") == "teams" and component("scheduling.leader.worker") == "scheduling"
    assert LAYERS.index(component("scheduling.models")) > LAYERS.index(component("teams.models"))
    assert component("mlqueue.urls") == "wiring" and component("mlqueue.errors") == "shared"
    assert component("agents.node.daemon") == "agents.node" and component("agents.api") == "agents"
