"""QA walkthrough fix in static/js/mlqueue.js: <time data-local> elements are rewritten in the
viewer's zone with options the browsers accept (dateStyle/timeStyle with timeZoneName is a
TypeError in V8 and SpiderMonkey), and the page's live socket still opens. Run in Node (V8, as
Chrome), with the few DOM pieces the script touches stubbed."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from django.conf import settings

SCRIPT = Path(settings.BASE_DIR) / "static" / "js" / "mlqueue.js"

HARNESS = r"""
const fs = require("fs");
const handlers = {}, sockets = [];
function timeNode(iso, kind) {
  const attrs = {"datetime": iso, "data-local": kind};
  return {textContent: " server text UTC ", title: "", getAttribute: (name) => (name in attrs ? attrs[name] : null)};
}
const times = [
  timeNode("2026-04-20T09:00:00+00:00", ""),
  timeNode("2026-04-20T09:00:00+00:00", "short"),
  timeNode("2026-04-20T09:00:05+00:00", "seconds"),
  timeNode("not a time", ""),
];
const root = {getAttribute: (name) => ({"data-live-path": "/ws/jobs/", "data-live-refresh": "#queue-table"})[name]};
global.window = global;
global.location = {protocol: "http:", host: "testserver"};
global.WebSocket = function (url) { sockets.push(url); };
global.htmx = {onLoad: () => {}, trigger: () => {}, ajax: () => {}};
global.document = {
  addEventListener: (name, handler) => { handlers[name] = handler; },
  querySelectorAll: (selector) => (selector === "time[data-local]" ? times : []),
  querySelector: (selector) => (selector === "[data-live-path]" ? root : null),
  getElementById: () => null,
};
eval(fs.readFileSync(process.argv[1], "utf8"));
try { handlers.DOMContentLoaded(); } catch (error) { console.error(String(error)); }
console.log(JSON.stringify({texts: times.map((t) => t.textContent), titles: times.map((t) => t.title), sockets}));
"""


@pytest.fixture(scope="module")
def ran() -> dict:
    node = shutil.which("node")
    if node is None:
        pytest.skip("needs Node.js to run the page script")
    done = subprocess.run(
        [node, "-e", HARNESS, str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=30,
        env={"TZ": "UTC", "LANG": "en_US.UTF-8", "PATH": "/usr/bin:/bin"},
        check=True,
    )
    return {**json.loads(done.stdout), "stderr": done.stderr}


def test_local_times_use_options_the_browser_accepts(ran):
    full, short, seconds, bad = ran["texts"]
    assert ran["stderr"] == ""
    assert "2026" in full and "09:00" in full and "UTC" in full
    assert "2026" not in short and "09:00" in short and "UTC" in short
    assert "09:00:05" in seconds and "UTC" in seconds
    assert bad == " server text UTC "  # not a time: the server's text stays
    assert ran["titles"][:3] == ["server text UTC"] * 3  # the UTC text kept in the title


def test_the_live_socket_opens_after_the_times_are_rewritten(ran):
    assert ran["sockets"] == ["ws://testserver/ws/jobs/"]
