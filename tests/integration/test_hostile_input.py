"""Hostile input, endpoint by endpoint: each case is refused with an exact status and a message
naming what is wrong, and none writes a row. (The heartbeat lane's own checks, which parse
bodies outside DRF, are in test_fastlane.py.)"""

import base64
import html
import json
from urllib.parse import urlencode

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.test import Client

from agents.services import do_register_node
from mlqueue.middleware import CONTROL_CHARACTER, TOO_MANY_PARAMETERS
from mlqueue.pagination import BAD_LIMIT, INVALID_CURSOR
from mlqueue.parsers import JSON_TOO_DEEP, LONE_SURROGATE, MALFORMED_JSON, NUL_IN_TEXT
from scheduling.models import Job, Node, Task, TaskLog
from scheduling.services import check_job_submission, do_submit_job
from scheduling.spec import NOT_FINITE
from scheduling.web.submit_page import MAX_YAML_BYTES, MAX_YAML_DEPTH, YAML_TOO_DEEP, YAML_TOO_LARGE, YAML_VALUE
from teams.models import AuditEvent
from tests.conftest import make_spec

JOIN_TOKEN = "join-hostile-input-test"
INVENTORY = {"zone": "z1", "rack": "z1-r1", "gpu_type": "H100", "gpu_count": 8, "cpu_count": 64, "memory_gb": 512}
JSON, FORM, TEXT = "application/json", "application/x-www-form-urlencoded", "text/plain"
NUL = CONTROL_CHARACTER.format(code="U+0000")
TOO_DEEP = f"body: {JSON_TOO_DEEP}"
MALFORMED = "body: " + MALFORMED_JSON.partition(" (")[0]
BIG = 10**20  # past bigint
CPU_JOB = {"team": "research-foundation-models", "command": ["true"], "resources": {"tasks": 1}}


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def nested_list(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def nested_object(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


def submit_form(**values) -> dict:
    return {"action": "submit", "team": "research-foundation-models", "command": "true", **values}


def yaml_form(text: str) -> dict:
    return {"action": "from_yaml", "yaml": text}


# (case, method, path, who, body, content type, status, the message's expected part)
# who: a user's bearer token (API), "page:<user>" a browser session, "join" the agents' join
# token, "node" the registered node's token. A body that is not bytes is sent as JSON (or, with
# FORM, urlencoded). {job} and {node} are filled in from the fixture.
CASES = [
    # JSON nested 50,000 deep: a RecursionError (500) on every JSON endpoint before.
    ("deep list: submit", "POST", "/api/v1/jobs", "alice", nested_list(50_000), JSON, 400, TOO_DEEP),
    ("deep object: submit", "POST", "/api/v1/jobs", "alice", nested_object(40_000), JSON, 400, TOO_DEEP),
    (
        "deep field: submit",
        "POST",
        "/api/v1/jobs",
        "alice",
        b'{"team": "research-foundation-models", "env": ' + nested_list(50_000) + b"}",
        JSON,
        400,
        TOO_DEEP,
    ),
    ("65 levels: submit", "POST", "/api/v1/jobs", "alice", nested_list(65), JSON, 400, TOO_DEEP),
    ("deep: cancel", "POST", "/api/v1/jobs/{job}/cancel", "alice", nested_list(50_000), JSON, 400, TOO_DEEP),
    (
        "deep: quotas",
        "PATCH",
        "/api/v1/teams/research-foundation-models/quotas",
        "rita",
        nested_object(40_000),
        JSON,
        400,
        TOO_DEEP,
    ),
    ("deep: cordon", "POST", "/api/v1/nodes/{node}/cordon", "ops", nested_list(50_000), JSON, 400, TOO_DEEP),
    ("deep: register", "POST", "/api/v1/agents/register", "join", nested_list(50_000), JSON, 400, TOO_DEEP),
    (
        "deep: heartbeat view",
        "POST",
        "/api/v1/agents/{node}/heartbeat",
        "node",
        nested_list(50_000),
        JSON,
        400,
        TOO_DEEP,
    ),
    ("deep: agent events", "POST", "/api/v1/agents/{node}/events", "node", nested_object(40_000), JSON, 400, TOO_DEEP),
    (
        "brackets inside a string do not count",
        "POST",
        "/api/v1/jobs",
        "alice",
        make_spec(client_job_id="[" * 100),
        None,
        400,
        "client_job_id: use letters",
    ),
    (
        "an image that is container-runtime options",
        "POST",
        "/api/v1/jobs",
        "alice",
        make_spec(image="--privileged -v /:/host busybox"),
        None,
        400,
        "image: '--privileged -v /:/host busybox' is not",
    ),
    # Non-finite numbers: JSON 1e400 parses to inf, and nan passes every range check.
    (
        "max_runtime_hours 1e400",
        "POST",
        "/api/v1/jobs",
        "alice",
        json.dumps(make_spec()).replace('"max_runtime_hours": 168', '"max_runtime_hours": 1e400').encode(),
        JSON,
        400,
        "max_runtime_hours: " + NOT_FINITE.format(value="inf"),
    ),
    (
        "max_runtime_hours -1e400",
        "POST",
        "/api/v1/jobs",
        "alice",
        json.dumps(make_spec()).replace('"max_runtime_hours": 168', '"max_runtime_hours": -1e400').encode(),
        JSON,
        400,
        "max_runtime_hours: " + NOT_FINITE.format(value="-inf"),
    ),
    (
        "max_runtime_hours 10**400",
        "POST",
        "/api/v1/jobs",
        "alice",
        make_spec(max_runtime_hours=10**400),
        None,
        400,
        "max_runtime_hours: " + NOT_FINITE.format(value="inf"),
    ),
    # Inside a block (a sweep, an array) the field within it is named, and a draw between
    # bounds too far apart cannot overflow to infinity (that was a 500).
    (
        "a sweep range of +-1e308",
        "POST",
        "/api/v1/jobs",
        "alice",
        json.dumps(
            make_spec(sweep={"method": "random", "max_trials": 2, "parameters": {"a": {"min": -1e308, "max": 1e308}}})
        ).encode(),
        JSON,
        400,
        "sweep.parameters: a: min must be between -1e15 and 1e15, not -1e+308.",
    ),
    (
        "a sweep range of a 401-digit integer",
        "POST",
        "/api/v1/jobs/dry-run",
        "alice",
        make_spec(
            sweep={"method": "random", "max_trials": 2, "parameters": {"a": {"min": 1, "max": 10**400, "int": True}}}
        ),
        None,
        400,
        "sweep.parameters: a: max must be between -1e15 and 1e15, not an integer of 401 digits.",
    ),
    (
        "a sweep bound of 1e400",
        "POST",
        "/api/v1/jobs",
        "alice",
        json.dumps(make_spec(sweep={"method": "random", "max_trials": 2, "parameters": {"a": {"min": 1, "max": 2}}}))
        .replace('"max": 2}', '"max": 1e400}')
        .encode(),
        JSON,
        400,
        "sweep.parameters: a: max must be a finite number, not inf.",
    ),
    (
        "a pipeline step's time limit of 1e400",
        "POST",
        "/api/v1/jobs",
        "alice",
        json.dumps(make_spec(pipeline={"steps": [{"name": "a", "command": ["x"], "max_runtime_hours": 2}]}))
        .replace('"max_runtime_hours": 2}', '"max_runtime_hours": 1e400}')
        .encode(),
        JSON,
        400,
        "pipeline.steps[0].max_runtime_hours: ",
    ),
    (
        "an array count of 1e400",
        "POST",
        "/api/v1/jobs",
        "alice",
        json.dumps(make_spec(array={"count": 2})).replace('"count": 2', '"count": 1e400').encode(),
        JSON,
        400,
        "array.count: must be an integer, not float.",
    ),
    (
        "max_runtime_hours Infinity",
        "POST",
        "/api/v1/jobs",
        "alice",
        b'{"team": "research-vision", "max_runtime_hours": Infinity}',
        JSON,
        400,
        f"{MALFORMED} (Infinity is not valid JSON)",
    ),
    (
        "max_runtime_hours -Infinity",
        "POST",
        "/api/v1/jobs",
        "alice",
        b'{"team": "research-vision", "max_runtime_hours": -Infinity}',
        JSON,
        400,
        f"{MALFORMED} (-Infinity is not valid JSON)",
    ),
    (
        "max_runtime_hours 'inf'",
        "POST",
        "/api/v1/jobs",
        "alice",
        make_spec(max_runtime_hours="inf"),
        None,
        400,
        "max_runtime_hours: must be a number, not the string 'inf'.",
    ),
    (
        "max_runtime_hours 1e308",
        "POST",
        "/api/v1/jobs",
        "alice",
        make_spec(max_runtime_hours=1e308),
        None,
        400,
        "max_runtime_hours: must be at least 1 second (0.0003 hours) and at most 720 hours, got 1e+308.",
    ),
    (
        "max_runtime_hours a hair over the limit",
        "POST",
        "/api/v1/jobs",
        "alice",
        make_spec(max_runtime_hours=720.0000001),
        None,
        400,
        "max_runtime_hours: must be at least 1 second (0.0003 hours) and at most 720 hours, got 720.0000001.",
    ),
    (
        "a blank program",
        "POST",
        "/api/v1/jobs",
        "alice",
        make_spec(command=[" "]),
        None,
        400,
        "command.0: the program to run may not be blank (the command's first element).",
    ),
    (
        "an integer of 5,000 digits",
        "POST",
        "/api/v1/jobs",
        "alice",
        b'{"team": "research-vision", "max_runtime_hours": ' + b"9" * 5000 + b"}",
        JSON,
        400,
        f"{MALFORMED} (Exceeds the limit (4300 digits)",
    ),
    (
        "form max_runtime_hours inf",
        "POST",
        "/jobs/new/",
        "page:alice",
        submit_form(max_runtime_hours="inf"),
        FORM,
        200,
        "max_runtime_hours: " + NOT_FINITE.format(value="inf"),
    ),
    (
        "form max_runtime_hours nan",
        "POST",
        "/jobs/new/",
        "page:alice",
        submit_form(max_runtime_hours="nan"),
        FORM,
        200,
        "max_runtime_hours: " + NOT_FINITE.format(value="nan"),
    ),
    (
        "form max_runtime_hours 1e400",
        "POST",
        "/jobs/new/",
        "page:alice",
        submit_form(max_runtime_hours="1e400"),
        FORM,
        200,
        "max_runtime_hours: " + NOT_FINITE.format(value="inf"),
    ),
    (
        "form dry run max_runtime_hours -inf",
        "POST",
        "/jobs/new/",
        "page:alice",
        submit_form(action="dry_run", max_runtime_hours="-inf"),
        FORM,
        200,
        "max_runtime_hours: " + NOT_FINITE.format(value="-inf"),
    ),
    (
        "form huge dependency id",
        "POST",
        "/jobs/new/",
        "page:alice",
        submit_form(depends_on=str(BIG)),
        FORM,
        200,
        "depends_on.0: Ensure this value is less than or equal to 9223372036854775807.",
    ),
    (
        "quota weight 1e400",
        "PATCH",
        "/api/v1/teams/research-foundation-models/quotas",
        "rita",
        b'{"reason": "x", "quotas": {"gpu:H100": {"weight": 1e400}}}',
        JSON,
        400,
        "quotas.gpu:H100.weight: A valid number is required.",
    ),
    (
        "quota weight 10**400",
        "PATCH",
        "/api/v1/teams/research-foundation-models/quotas",
        "rita",
        {"reason": "x", "quotas": {"gpu:H100": {"weight": 10**400}}},
        None,
        400,
        "quotas.gpu:H100.weight: Integer value too large to convert to float",
    ),
    (
        "quota guaranteed past bigint",
        "PATCH",
        "/api/v1/teams/research-foundation-models/quotas",
        "rita",
        {"reason": "x", "quotas": {"gpu:H100": {"guaranteed": BIG}}},
        None,
        400,
        "quotas.gpu:H100.guaranteed: Ensure this value is less than or equal to 1000000.",
    ),
    (
        "dependency id past bigint",
        "POST",
        "/api/v1/jobs",
        "alice",
        make_spec(depends_on=[BIG]),
        None,
        400,
        "depends_on.0: Ensure this value is less than or equal to 9223372036854775807.",
    ),
    # Cursors: DRF answered some with a 404 and crashed (500) on others.
    ("cursor garbage", "GET", "/api/v1/jobs?cursor=garbage", "alice", None, None, 400, f"cursor: {INVALID_CURSOR}"),
    ("cursor NUL", "GET", "/api/v1/jobs?cursor=%00", "alice", None, None, 400, f"cursor: {NUL}"),
    (
        "cursor position not an id",
        "GET",
        f"/api/v1/jobs?cursor={b64('p=abc')}",
        "alice",
        None,
        None,
        400,
        f"cursor: {INVALID_CURSOR}",
    ),
    (
        "cursor position past bigint",
        "GET",
        f"/api/v1/jobs?cursor={b64(f'p={BIG}')}",
        "alice",
        None,
        None,
        400,
        f"cursor: {INVALID_CURSOR}",
    ),
    (
        "cursor offset not a number",
        "GET",
        f"/api/v1/jobs?cursor={b64('o=x')}",
        "alice",
        None,
        None,
        400,
        f"cursor: {INVALID_CURSOR}",
    ),
    (
        "cursor reverse not a number",
        "GET",
        f"/api/v1/jobs?cursor={b64('r=yes')}",
        "alice",
        None,
        None,
        400,
        f"cursor: {INVALID_CURSOR}",
    ),
    (
        "cursor huge",
        "GET",
        "/api/v1/jobs?cursor=" + "QUFB" * 5000,
        "alice",
        None,
        None,
        400,
        f"cursor: {INVALID_CURSOR}",
    ),
    (
        "cursor not ASCII",
        "GET",
        "/api/v1/jobs?cursor=%C3%A9t%C3%A9",
        "alice",
        None,
        None,
        400,
        f"cursor: {INVALID_CURSOR}",
    ),
    (
        "cursor base64 of bytes",
        "GET",
        "/api/v1/jobs?cursor=" + base64.b64encode(b"\xff\xfe\x00").decode(),
        "alice",
        None,
        None,
        400,
        f"cursor: {INVALID_CURSOR}",
    ),
    (
        "events cursor garbage",
        "GET",
        "/api/v1/jobs/{job}/events?cursor=garbage",
        "alice",
        None,
        None,
        400,
        f"cursor: {INVALID_CURSOR}",
    ),
    (
        "events cursor not a time",
        "GET",
        f"/api/v1/jobs/{{job}}/events?cursor={b64('p=yesterday')}",
        "alice",
        None,
        None,
        400,
        f"cursor: {INVALID_CURSOR}",
    ),
    (
        "events cursor impossible date",
        "GET",
        f"/api/v1/jobs/{{job}}/events?cursor={b64('p=2024-13-45 10:00')}",
        "alice",
        None,
        None,
        400,
        f"cursor: {INVALID_CURSOR}",
    ),
    (
        "nodes cursor garbage",
        "GET",
        "/api/v1/nodes?cursor=garbage",
        "ops",
        None,
        None,
        400,
        f"cursor: {INVALID_CURSOR}",
    ),
    (
        "nodes cursor hiding a NUL",
        "GET",
        f"/api/v1/nodes?cursor={b64('p=a%00b')}",
        "ops",
        None,
        None,
        400,
        f"cursor: {INVALID_CURSOR}",
    ),
    (
        "limit not a number",
        "GET",
        "/api/v1/jobs?limit=abc",
        "alice",
        None,
        None,
        400,
        "limit: " + BAD_LIMIT.format(max=500),
    ),
    (
        "limit past any integer",
        "GET",
        f"/api/v1/jobs?limit={BIG}",
        "alice",
        None,
        None,
        400,
        "limit: " + BAD_LIMIT.format(max=500),
    ),
    ("limit negative", "GET", "/api/v1/jobs?limit=-1", "alice", None, None, 400, "limit: " + BAD_LIMIT.format(max=500)),
    (
        "limit zero",
        "GET",
        "/api/v1/jobs/{job}/events?limit=0",
        "alice",
        None,
        None,
        400,
        "limit: " + BAD_LIMIT.format(max=500),
    ),
    ("limit a float", "GET", "/api/v1/nodes?limit=1.5", "ops", None, None, 400, "limit: " + BAD_LIMIT.format(max=5000)),
    (
        "queue limit past any integer",
        "GET",
        f"/api/v1/queue?limit={BIG}",
        "alice",
        None,
        None,
        400,
        "limit: Ensure this value is less than or equal to 500.",
    ),
    (
        "queue offset negative",
        "GET",
        "/api/v1/queue?offset=-1",
        "alice",
        None,
        None,
        400,
        "offset: Ensure this value is greater than or equal to 0.",
    ),
    # Control characters in paths and queries: Postgres cannot hold NUL (a 500 before).
    ("NUL: queue page", "GET", "/queue/?team=%00", "page:alice", None, None, 400, f"team {NUL}"),
    ("NUL: teams page", "GET", "/teams/?team=%00", "page:alice", None, None, 400, f"team {NUL}"),
    ("NUL: jobs filter", "GET", "/api/v1/jobs?team=%00", "alice", None, None, 400, f"team: {NUL}"),
    ("NUL: owner filter", "GET", "/api/v1/jobs?owner=a%00", "alice", None, None, 400, f"owner: {NUL}"),
    ("NUL: queue filter", "GET", "/api/v1/queue?team=%00", "alice", None, None, 400, f"team: {NUL}"),
    ("NUL: nodes filter", "GET", "/api/v1/nodes?zone=%00", "ops", None, None, 400, f"zone: {NUL}"),
    (
        "nodes: a one-value filter twice",
        "GET",
        "/api/v1/nodes?rack=z1-r1&rack=z2-r1",
        "ops",
        None,
        None,
        400,
        "rack: one rack at a time (only state may be given more than once).",
    ),
    (
        "nodes: no such filter",
        "GET",
        "/api/v1/nodes?ordering=name",
        "ops",
        None,
        None,
        400,
        "ordering: not a filter: filter by state, zone, rack, gpu_type, label, name.",
    ),
    ("NUL: a parameter's name", "GET", "/api/v1/jobs?%00=1", "alice", None, None, 400, f"query: {NUL}"),
    (
        "NUL: node name in the path",
        "POST",
        "/api/v1/nodes/a%00b/cordon",
        "ops",
        {"reason": "x"},
        None,
        400,
        f"path: {NUL}",
    ),
    ("NUL: team name in the path", "GET", "/api/v1/teams/a%00/quotas", "alice", None, None, 400, f"path: {NUL}"),
    (
        "NUL: agent name in the path",
        "POST",
        "/api/v1/agents/a%00/events",
        "node",
        {"events": []},
        None,
        400,
        f"path: {NUL}",
    ),
    (
        "tab in a filter",
        "GET",
        "/api/v1/jobs?state=%09",
        "alice",
        None,
        None,
        400,
        "state: " + CONTROL_CHARACTER.format(code="U+0009"),
    ),
    (
        "DEL on the nodes page",
        "GET",
        "/nodes/?part=%7F",
        "page:ops",
        None,
        None,
        400,
        "part " + CONTROL_CHARACTER.format(code="U+007F"),
    ),
    ("NUL: clone", "GET", "/jobs/new/?clone=%00", "page:alice", None, None, 400, f"clone {NUL}"),
    (
        "too many parameters for the API",
        "GET",
        "/api/v1/jobs?" + "&".join(f"state={i}" for i in range(1001)),
        "alice",
        None,
        None,
        400,
        "query: " + TOO_MANY_PARAMETERS.format(limit=1000),
    ),
    (
        "too many parameters for a page",
        "GET",
        "/queue/?" + "&".join(f"a{i}=1" for i in range(1001)),
        "page:alice",
        None,
        None,
        400,
        "query " + TOO_MANY_PARAMETERS.format(limit=1000),
    ),
    (
        "a multipart form without a boundary",
        "POST",
        "/jobs/new/",
        "page:alice",
        b"x",
        "multipart/form-data",
        400,
        "form is not a readable form body",
    ),
    (
        "NUL in a multipart form",
        "POST",
        "/jobs/new/",
        "page:alice",
        b'--x\r\nContent-Disposition: form-data; name="action"\r\n\r\nsub\x00mit\r\n--x--\r\n',
        "multipart/form-data; boundary=x",
        400,
        f"action {NUL_IN_TEXT}",
    ),
    (
        "NUL in a form field",
        "POST",
        "/jobs/new/",
        "page:alice",
        submit_form(name="a\x00b"),
        FORM,
        400,
        f"name {NUL_IN_TEXT}",
    ),
    (
        "NUL in a teams form",
        "POST",
        "/teams/",
        "page:rita",
        {"team": "\x00", "reason": "x"},
        FORM,
        400,
        f"team {NUL_IN_TEXT}",
    ),
    # Text Postgres cannot store, or that is not Unicode, inside JSON strings.
    (
        "NUL in the job name",
        "POST",
        "/api/v1/jobs",
        "alice",
        make_spec(name="a\x00b"),
        None,
        400,
        f"name: {NUL_IN_TEXT}",
    ),
    (
        "NUL in an env value",
        "POST",
        "/api/v1/jobs",
        "alice",
        make_spec(env={"A": "\x00"}),
        None,
        400,
        f"env.A: {NUL_IN_TEXT}",
    ),
    (
        "lone surrogate in the command",
        "POST",
        "/api/v1/jobs",
        "alice",
        make_spec(command=["\ud800"]),
        None,
        400,
        "command.0: " + LONE_SURROGATE.format(code="U+D800"),
    ),
    (
        "lone low surrogate, upper case",
        "POST",
        "/api/v1/jobs",
        "alice",
        b'{"team": "research-vision", "name": "x\\uDFFF"}',
        JSON,
        400,
        "name: " + LONE_SURROGATE.format(code="U+DFFF"),
    ),
    (
        "lone surrogate as a key",
        "POST",
        "/api/v1/jobs",
        "alice",
        {"\ud800": 1},
        None,
        400,
        "body: a key " + LONE_SURROGATE.format(code="U+D800"),
    ),
    (
        "NUL in a cancel reason",
        "POST",
        "/api/v1/jobs/{job}/cancel",
        "alice",
        {"reason": "\x00"},
        None,
        400,
        f"reason: {NUL_IN_TEXT}",
    ),
    (
        "NUL in a quota reason",
        "PATCH",
        "/api/v1/teams/research-foundation-models/quotas",
        "rita",
        {"reason": "\x00", "quotas": {"gpu:H100": {"weight": 2}}},
        None,
        400,
        f"reason: {NUL_IN_TEXT}",
    ),
    (
        "NUL in a node name at registration",
        "POST",
        "/api/v1/agents/register",
        "join",
        {**INVENTORY, "name": "n\x00"},
        None,
        400,
        f"name: {NUL_IN_TEXT}",
    ),
    # (A NUL in a log chunk is stored as U+FFFD, not refused: test_agent_security.py.)
    (
        "a log chunk over 64 KiB",
        "POST",
        "/api/v1/agents/{node}/events",
        "node",
        {"events": [{"job_id": 1, "rank": 0, "attempt": 1, "type": "log", "data": "x" * (64 * 1024 + 1)}]},
        None,
        400,
        "events.0.data: Ensure this field has no more than 65536 characters.",
    ),
    # Bodies of the wrong shape or type.
    ("body a string", "POST", "/api/v1/jobs", "alice", "hello", None, 400, "body: "),
    ("body a number", "POST", "/api/v1/jobs", "alice", 42, None, 400, "body: "),
    ("body null", "POST", "/api/v1/jobs", "alice", b"null", JSON, 400, "body: "),
    ("body empty", "POST", "/api/v1/jobs", "alice", b"", JSON, 400, "team: This field is required."),
    ("body not UTF-8", "POST", "/api/v1/jobs", "alice", b'{"team": "\xff"}', JSON, 400, MALFORMED),
    (
        "body with a byte-order mark",
        "POST",
        "/api/v1/jobs",
        "alice",
        b"\xef\xbb\xbf{}",
        JSON,
        400,
        f"{MALFORMED} (Unexpected UTF-8 BOM",
    ),
    ("two JSON documents", "POST", "/api/v1/jobs", "alice", b"{} {}", JSON, 400, f"{MALFORMED} (Extra data"),
    ("body only whitespace", "POST", "/api/v1/jobs", "alice", b"  \n", JSON, 400, MALFORMED),
    (
        "body JSON patch",
        "PATCH",
        "/api/v1/teams/research-foundation-models/quotas",
        "rita",
        b"[]",
        "application/json-patch+json",
        415,
        "Unsupported media type",
    ),
    ("body a form", "POST", "/api/v1/jobs", "alice", b"team=x", FORM, 415, "Unsupported media type"),
    ("body plain text", "POST", "/api/v1/jobs/{job}/cancel", "alice", b"{}", TEXT, 415, "Unsupported media type"),
    ("cancel body a list", "POST", "/api/v1/jobs/{job}/cancel", "alice", [1], None, 400, "body: "),
    ("cordon body a string", "POST", "/api/v1/nodes/{node}/cordon", "ops", "x", None, 400, "body: "),
    ("quotas body a list", "PATCH", "/api/v1/teams/research-foundation-models/quotas", "rita", [], None, 400, "body: "),
    ("register body a list", "POST", "/api/v1/agents/register", "join", [], None, 400, "body: "),
    ("events body a number", "POST", "/api/v1/agents/{node}/events", "node", 7, None, 400, "body: "),
    ("heartbeat body a string", "POST", "/api/v1/agents/{node}/heartbeat", "node", "x", None, 400, "body: "),
    (
        "submit duplicate keys of a nested object",
        "POST",
        "/api/v1/jobs",
        "alice",
        json.dumps(make_spec()).replace('"gpu_count": 64', '"gpu_count": "x", "gpu_count": -1').encode(),
        JSON,
        400,
        "resources.gpu_count: duplicate key 'gpu_count': a key may appear only once in an object.",
    ),
    # Odd query parameters and ids.
    (
        "state not a state",
        "GET",
        "/api/v1/jobs?state=BOGUS",
        "alice",
        None,
        None,
        400,
        "state: BOGUS is not one of PENDING, ",
    ),
    (
        "nodes state not a state",
        "GET",
        "/api/v1/nodes?state=%E2%98%83",
        "ops",
        None,
        None,
        400,
        "state: \u2603 is not one of ",
    ),
    ("job id past bigint", "GET", f"/api/v1/jobs/{BIG}", "alice", None, None, 404, "no such job: "),
    ("events of a job id past bigint", "GET", f"/api/v1/jobs/{BIG}/events", "alice", None, None, 404, "no such job: "),
    (
        "cancel a job id past bigint",
        "POST",
        f"/api/v1/jobs/{BIG}/cancel",
        "alice",
        {"reason": "x"},
        None,
        404,
        "no such job: ",
    ),
    (
        "log rank not a number",
        "GET",
        "/api/v1/jobs/{job}/logs?rank=x",
        "alice",
        None,
        None,
        400,
        "rank: A valid integer is required.",
    ),
    ("job page id past bigint", "GET", f"/jobs/{BIG}/", "page:alice", None, None, 404, ""),
    # The submit page's YAML box: 20 KB of "[" took 15 s of CPU and ended in a 500.
    (
        "YAML 20 KB of brackets",
        "POST",
        "/jobs/new/",
        "page:alice",
        yaml_form("[" * 20_000),
        FORM,
        400,
        YAML_TOO_DEEP.format(limit=MAX_YAML_DEPTH),
    ),
    (
        "YAML nested block sequences",
        "POST",
        "/jobs/new/",
        "page:alice",
        yaml_form("- " * 20_000 + "x"),
        FORM,
        400,
        YAML_TOO_DEEP.format(limit=MAX_YAML_DEPTH),
    ),
    (
        "YAML nested by indentation",
        "POST",
        "/jobs/new/",
        "page:alice",
        yaml_form("".join(" " * i + "a:\n" for i in range(100)) + " " * 100 + "b"),
        FORM,
        400,
        YAML_TOO_DEEP.format(limit=MAX_YAML_DEPTH),
    ),
    (
        "YAML over 64 KB",
        "POST",
        "/jobs/new/",
        "page:alice",
        yaml_form("name: " + "x" * MAX_YAML_BYTES),
        FORM,
        400,
        YAML_TOO_LARGE.format(size=MAX_YAML_BYTES + 6, limit=MAX_YAML_BYTES),
    ),
    (
        "YAML integer of 5,000 digits",
        "POST",
        "/jobs/new/",
        "page:alice",
        yaml_form("gpu: " + "9" * 5000),
        FORM,
        400,
        YAML_VALUE.format(problem="").rstrip("."),
    ),
    # (A date that does not exist, "name: 2024-13-45", was a YAML value error; YAML reads as
    # YAML 1.2 now, dates as the text they are, and a name of "2024-13-45" is a name.)
    (
        "YAML NUL escape",
        "POST",
        "/jobs/new/",
        "page:alice",
        yaml_form('name: "a\\0b"'),
        FORM,
        400,
        f"name: {NUL_IN_TEXT}",
    ),
    (
        "YAML lone surrogate escape",
        "POST",
        "/jobs/new/",
        "page:alice",
        yaml_form('command: ["\\ud800"]'),
        FORM,
        400,
        "command.0: " + LONE_SURROGATE.format(code="U+D800"),
    ),
    (
        "YAML brackets on a dry run",
        "POST",
        "/jobs/new/",
        "page:alice",
        submit_form(action="dry_run", yaml="[" * 20_000),
        FORM,
        200,
        "",
    ),
]
# Integers past a column's range in agent bodies (bounded in agents/protocol.py).
CASES += [
    (
        "register scratch_disk_gb past bigint",
        "POST",
        "/api/v1/agents/register",
        "join",
        {**INVENTORY, "name": "n9", "scratch_disk_gb": BIG},
        None,
        400,
        "scratch_disk_gb: ",
    ),
    (
        "events job_id past bigint",
        "POST",
        "/api/v1/agents/{node}/events",
        "node",
        {"events": [{"job_id": BIG, "rank": 0, "attempt": 1, "type": "started"}]},
        None,
        400,
        "events.0.job_id: ",
    ),
    (
        "heartbeat attempt past int",
        "POST",
        "/api/v1/agents/{node}/heartbeat",
        "node",
        {"tasks": [{"job_id": 1, "rank": 0, "attempt": 2**31, "state": "running"}]},
        None,
        400,
        "tasks.0.attempt: ",
    ),
]


def counts() -> dict[str, int]:
    return {model.__name__: model.objects.count() for model in (Job, Task, AuditEvent, Node, TaskLog)}


@pytest.fixture
def world(api, settings):
    """alice's job and a registered node, for the paths that name them."""
    cache.clear()  # rate-limit counters from earlier cases
    settings.MLQ_AGENT_JOIN_TOKEN = JOIN_TOKEN
    alice = get_user_model().objects.get(username="alice")
    team, spec = check_job_submission(user=alice, data=CPU_JOB)
    job, _ = do_submit_job(user=alice, team=team, spec=spec)
    node, node_token = do_register_node(name="hostile-1", inventory=INVENTORY)
    return {"job": job.pk, "node": node.name, "node_token": node_token}


def client_for(who: str | None, api, world):
    if who is not None and who.startswith("page:"):
        client = Client()
        client.force_login(get_user_model().objects.get(username=who.removeprefix("page:")))
        return client
    if who in ("join", "node"):
        client = api(None)
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {JOIN_TOKEN if who == 'join' else world['node_token']}")
        return client
    return api(who)


def send(client, method: str, path: str, body, content_type: str | None):
    if body is None:
        return client.generic(method, path)
    if content_type == FORM and isinstance(body, dict):
        return client.generic(method, path, urlencode(body), content_type=FORM)
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    return client.generic(method, path, body, content_type=content_type or JSON)


def message_of(response) -> str:
    if response["Content-Type"].startswith("application/json"):
        return response.json()["detail"]
    return html.unescape(response.content.decode())


@pytest.mark.parametrize(
    "case, method, path, who, body, content_type, status, expected", CASES, ids=[c[0] for c in CASES]
)
def test_hostile_input_is_refused_cleanly(api, world, case, method, path, who, body, content_type, status, expected):
    client = client_for(who, api, world)
    before = counts()

    response = send(client, method, path.format(**world), body, content_type)

    assert response.status_code == status, response.content[:500]
    assert expected in message_of(response), message_of(response)[:2000]
    assert counts() == before


def test_there_are_at_least_sixty_cases():
    assert len(CASES) >= 60


@pytest.mark.parametrize("path", ["/api/v1/jobs/abc/cancel", "/api/v1/maintenance/abc", "/api/v1/nope"])
def test_an_api_path_that_matches_no_route_answers_in_json(api, path):
    response = api("ops").get(path)
    assert response.status_code == 404
    assert response.json() == {"detail": f"no such API path: {path}"}
