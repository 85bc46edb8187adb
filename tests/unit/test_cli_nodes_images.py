"""`mlq nodes -o wide` says whether each node's agent runs jobs' images."""

from tests.unit.test_cli import FakeServer, run


def test_the_wide_table_says_which_nodes_run_images():
    nodes = [
        {"name": f"n{i}", "state": "READY", "gpu_type": "H100", "gpu_count": 8, "runs_images": runs}
        for i, runs in enumerate((True, False, None))
    ]
    server = FakeServer({("GET", "/api/v1/nodes"): (200, {"next": None, "results": nodes})})
    shown = run(server, "nodes", "-o", "wide")
    assert shown.exit_code == 0, shown.output
    header, *rows = shown.output.splitlines()
    assert header.split()[-1] == "IMAGES"
    assert [row.split()[-1] for row in rows] == ["yes", "no", "-"]
    assert "IMAGES" not in run(server, "nodes").output
