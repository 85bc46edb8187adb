"""The web reads the scheduler's state through the domain (selectors, the published queue
order), never through the leader: a web process must not load the worker, its Redis
wake-ups, its leadership or the forecaster's multiprocessing (issue 14)."""

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "scheduling" / "web"
LEADER = "scheduling.leader"


def imported_names(source: str, *, package: str) -> set[str]:
    """Every module `source` (a module of `package`) imports, at the top or inside a function,
    relative imports resolved; `from scheduling import leader` counts as `scheduling.leader`."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (base, node.module) if part)
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names.add(str(node.args[0].value))
    return names


def leader_imports(path: Path) -> list[str]:
    package = ".".join(path.relative_to(ROOT).parent.parts)
    return sorted(
        name
        for name in imported_names(path.read_text(), package=package)
        if name == LEADER or name.startswith(LEADER + ".")
    )


def test_the_walk_sees_every_form_of_import():
    source = (
        "import scheduling.leader.worker\n"
        "def later():\n"
        "    from scheduling import leader\n"
        "    from ..leader import snapshot\n"
        "    from . import queue\n"
        "    importlib.import_module('scheduling.leader.apply')\n"
    )
    assert imported_names(source, package="scheduling.web") == {
        "scheduling.leader.worker",
        "scheduling",
        "scheduling.leader",
        "scheduling.leader.snapshot",
        "scheduling.web",
        "scheduling.web.queue",
        "scheduling.leader.apply",
    }


def test_no_module_of_the_web_imports_the_leader():
    modules = sorted(WEB.rglob("*.py"))
    assert {"api.py", "queue.py", "explanations.py"} <= {path.name for path in modules}
    offending = {str(path.relative_to(ROOT)): leader_imports(path) for path in modules}
    assert {path: names for path, names in offending.items() if names} == {}


# A fresh interpreter (-I, this checkout first on sys.path): whatever an earlier test imported
# does not count.
IMPORT_THE_WEB = """
import importlib, json, os, pkgutil, sys
sys.path.insert(0, {root!r})
os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
import django
django.setup()
import scheduling.web.api
after_api = sorted(sys.modules)
import scheduling.web
for found in pkgutil.iter_modules(scheduling.web.__path__):
    importlib.import_module(f"scheduling.web.{{found.name}}")
import mlqueue.urls, mlqueue.routing  # everything a web process serves
print(json.dumps({{"file": scheduling.web.api.__file__, "after_api": after_api, "after_web": sorted(sys.modules)}}))
"""


def test_importing_the_web_loads_nothing_of_the_leader():
    ran = subprocess.run(
        [sys.executable, "-I", "-c", IMPORT_THE_WEB.format(root=str(ROOT))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    found = json.loads(ran.stdout)
    assert Path(found["file"]) == WEB / "api.py"
    assert "scheduling.leader.worker" not in found["after_api"]
    assert [name for name in found["after_web"] if name.startswith(LEADER)] == []
