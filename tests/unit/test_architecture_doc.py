"""docs/architecture.md stays true to the tree (issue 14): every path in its "Where things are"
table exists, every package a newcomer would look for has a row there, and every path the page
names anywhere else exists too. Moving or adding a package without updating the page fails here."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
APPS = ("mlqueue", "teams", "scheduling", "notifications", "agents")
TOP_LEVEL = (
    "mlqueue",
    "teams",
    "scheduling",
    "notifications",
    "agents",
    "tests",
    "bench",
    "docs",
    "templates",
    "static",
    "examples",
)
# A backticked repository path anywhere in the page: starts with a top-level folder, no spaces
# or wildcards (`/api/v1/jobs` is a URL, `scheduling.core` a module name: neither matches).
NAMED_PATH = re.compile(r"`((?:" + "|".join(TOP_LEVEL) + r")/[^`\s*]*)`")


def table_paths(text: str) -> list[str]:
    """The backticked paths in the first column of the table under "## Where things are"."""
    section = text.split("\n## Where things are\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")][2:]  # past the header and its rule
    return [path for row in rows for path in re.findall(r"`([^`]+)`", row.split("|")[1])]


def exists(path: str) -> bool:
    """A path ending in "/" names a folder, any other a file."""
    return (ROOT / path).is_dir() if path.endswith("/") else (ROOT / path).is_file()


def packages() -> set[str]:
    """Every top-level package, and every package directly inside an app."""
    top = {init.parent.name for init in ROOT.glob("*/__init__.py")}
    inside = {f"{app}/{init.parent.name}" for app in APPS for init in (ROOT / app).glob("*/__init__.py")}
    return top | inside


def test_the_table_is_where_the_page_says():
    paths = table_paths(DOC.read_text())
    assert len(paths) > 40, paths
    assert {"scheduling/core/", "scheduling/lifecycle.py", "agents/node/"} <= set(paths)


def test_every_path_in_the_table_exists():
    missing = [path for path in table_paths(DOC.read_text()) if not exists(path)]
    assert missing == [], "docs/architecture.md lists paths the tree does not have: " + ", ".join(missing)


def test_every_package_has_a_row():
    listed = {path.rstrip("/") for path in table_paths(DOC.read_text())}
    missing = sorted(packages() - listed)
    assert missing == [], "add a row to docs/architecture.md's 'Where things are' for: " + ", ".join(missing)


def test_the_first_column_is_read_cell_by_cell():
    page = """# x

## Where things are

| path | what is there |
| --- | --- |
| `a/` | a folder, `not/this` |
| `b.py`, `c/d.py` | two files |

## Next

| `e/` | not in the table |
"""
    assert table_paths(page) == ["a/", "b.py", "c/d.py"]


def test_the_packages_are_found():
    assert {
        "scheduling",
        "agents",
        "bench",
        "tests",
        "scheduling/leader",
        "scheduling/web",
        "agents/node",
        "scheduling/migrations",
    } <= packages()


def test_every_path_the_page_names_exists():
    named = sorted(set(NAMED_PATH.findall(DOC.read_text())))
    assert len(named) > 40
    missing = [path for path in named if not (ROOT / path).exists()]
    assert missing == [], "docs/architecture.md names paths the tree does not have: " + ", ".join(missing)
