"""The node agent runs on GPU hosts without the server: importing any module of agents.node,
in a fresh interpreter, loads nothing of Django, DRF, Channels, Celery, Redis, Postgres or
the server's apps (issue 14)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVER_ONLY = ("django", "rest_framework", "channels", "celery", "redis", "psycopg", "scheduling", "teams")

# Run with -I (no PYTHONPATH, no site of the user, no current directory) and this checkout first
# on sys.path, so that the modules checked are these, not an installed copy's.
IMPORT_EVERY_NODE_MODULE = """
import importlib, json, pkgutil, sys
sys.path.insert(0, {root!r})
import agents.node
names = sorted(f"agents.node.{{found.name}}" for found in pkgutil.iter_modules(agents.node.__path__))
for name in names:
    importlib.import_module(name)
print(json.dumps({{"file": agents.node.__file__, "imported": names, "loaded": sorted(sys.modules)}}))
"""


def load_every_node_module() -> dict:
    ran = subprocess.run(
        [sys.executable, "-I", "-c", IMPORT_EVERY_NODE_MODULE.format(root=str(ROOT))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout)


def test_the_node_agent_loads_nothing_of_the_server():
    found = load_every_node_module()
    assert Path(found["file"]).parent == ROOT / "agents" / "node"
    assert {"agents.node.daemon", "agents.node.supervise", "agents.node.runtime"} <= set(found["imported"])
    server = [
        name
        for name in found["loaded"]
        if name.split(".")[0] in SERVER_ONLY or (name.startswith("agents.") and not name.startswith("agents.node"))
    ]
    assert server == [], f"agents.node loaded server modules: {', '.join(server)}"
