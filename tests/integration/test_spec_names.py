"""Names people read: no trailing newline slipping past a `$` regex, and no invisible or
control character (bidi overrides, zero-width spaces) in job names, ids, env and label names,
label values, or team names and descriptions."""

import pytest
from django.core.exceptions import ValidationError as DjangoValidationError
from django.test import Client
from rest_framework import serializers

from scheduling.models import Job
from scheduling.spec import (
    CLIENT_JOB_ID,
    ENV_NAME,
    INVISIBLE,
    INVISIBLE_KEY,
    LABEL_KEY,
    StringMapField,
    refuse_invisible,
)
from teams.models import TEAM_NAME_VALIDATOR, AuditEvent, Team
from tests.conftest import make_spec

RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE: "invoice\u202efdp.exe" reads "invoiceexe.pdf"
RLO_NAME = "U+202E RIGHT-TO-LEFT OVERRIDE"


@pytest.mark.parametrize(
    "pattern, text",
    [
        (ENV_NAME, "FOO\n"),
        (LABEL_KEY, "ib\n"),
        (CLIENT_JOB_ID, "run-1\n"),
        (TEAM_NAME_VALIDATOR.regex, "vision\n"),
    ],
)
def test_no_name_pattern_takes_a_trailing_newline(pattern, text):
    assert pattern.match(text) is None and pattern.match(text[:-1])


def test_an_env_name_with_a_trailing_newline_is_refused_naming_env(api):
    response = api("alice").post("/api/v1/jobs", make_spec(env={"FOO\n": "1"}), format="json")
    assert response.status_code == 400
    message = INVISIBLE_KEY.format(key="FOO\n", char="U+000A CONTROL CHARACTER")
    assert response.json() == {"detail": f"env: {message}", "fields": {"env": [message]}}
    assert "'FOO\\n'" in message  # the name is quoted escaped, never raw


@pytest.mark.parametrize(
    "body, field, char",
    [
        (make_spec(name=f"invoice{RLO}fdp.exe"), "name", RLO_NAME),
        (make_spec(name="a\u2066b\u2069"), "name", "U+2066 LEFT-TO-RIGHT ISOLATE"),
        (make_spec(name="line\u2028two"), "name", "U+2028 LINE SEPARATOR"),
        (make_spec(name="tab\there"), "name", "U+0009 CONTROL CHARACTER"),
        (make_spec(client_job_id="run\u200b47"), "client_job_id", "U+200B ZERO WIDTH SPACE"),
        (make_spec(team=f"research{RLO}"), "team", RLO_NAME),
        (make_spec(owner=f"alice{RLO}"), "owner", RLO_NAME),
        (make_spec(node_selector={"ib": f"ndr{RLO}400"}), "node_selector.ib", RLO_NAME),
    ],
    ids=["bidi override", "bidi isolate", "line separator", "tab", "zero-width space", "team", "owner", "label value"],
)
def test_invisible_characters_in_names_are_refused_naming_the_field(api, body, field, char):
    response = api("alice").post("/api/v1/jobs", body, format="json")
    assert response.status_code == 400
    assert response.json()["fields"][field] == [INVISIBLE.format(char=char)]
    assert (Job.objects.count(), AuditEvent.objects.count()) == (0, 0)


@pytest.mark.parametrize(
    "body, field, key",
    [
        (make_spec(env={f"A{RLO}B": "1"}), "env", f"A{RLO}B"),
        (make_spec(secret_env={"\u2066TOKEN": "x"}), "secret_env", "\u2066TOKEN"),
        (make_spec(node_selector={f"ib{RLO}": "ndr400"}), "node_selector", f"ib{RLO}"),
    ],
    ids=["env", "secret_env", "label key"],
)
def test_invisible_characters_in_map_keys_are_refused_naming_the_map(api, body, field, key):
    response = api("alice").post("/api/v1/jobs", body, format="json")
    assert response.status_code == 400
    [message] = response.json()["fields"][field]
    assert message.startswith(f"{key!r} must not contain U+20") and RLO not in message and "\u2066" not in message
    assert Job.objects.count() == 0


def test_a_name_made_from_the_command_drops_invisible_characters(api):
    response = api("alice").post(
        "/api/v1/jobs", {"team": "research-foundation-models", "command": [f"/bin/invoice{RLO}fdp.exe"]}, format="json"
    )
    assert response.status_code == 201 and response.json()["name"] == "invoicefdp.exe"


def test_plain_unicode_names_are_still_welcome(api):
    response = api("alice").post("/api/v1/jobs", make_spec(name="Überprüfung – 学習 run 🚀"), format="json")
    assert response.status_code == 201 and response.json()["name"] == "Überprüfung – 学習 run 🚀"


def test_the_shared_helpers_for_other_serializers():
    """What agents/protocol.py reuses for node names and labels."""
    assert refuse_invisible("gpu-node-01", "name") == "gpu-node-01"
    with pytest.raises(serializers.ValidationError) as raised:
        refuse_invisible(f"node{RLO}", "name")
    assert raised.value.detail == {"name": [INVISIBLE.format(char=RLO_NAME)]}
    labels = StringMapField(key_pattern=LABEL_KEY, key_rule="a label name", max_items=4, printable_values=True)
    with pytest.raises(serializers.ValidationError) as raised:
        labels.run_validation({"rack": f"z1{RLO}"})
    assert raised.value.detail == {"rack": [INVISIBLE.format(char=RLO_NAME)]}


# --- teams (created in the admin) ----------------------------------------------------------


@pytest.mark.parametrize(
    "fields, field",
    [
        ({"name": "vision\n"}, "name"),
        ({"name": "vision", "description": f"the {RLO}real{RLO} team"}, "description"),
        ({"name": "vision", "description": "zero\u200bwidth"}, "description"),
    ],
    ids=["name with a newline", "description with a bidi override", "description with a zero-width space"],
)
def test_team_names_and_descriptions_refuse_invisible_characters(db, fields, field):
    with pytest.raises(DjangoValidationError) as raised:
        Team(**fields).full_clean()
    assert list(raised.value.message_dict) == [field]


def test_the_admin_refuses_a_team_description_with_a_bidi_override(demo):
    admin = Client()
    assert admin.login(username="ops", password="demo")
    response = admin.post("/admin/teams/team/add/", {"name": "new-team", "description": f"ours{RLO}"})
    assert response.status_code == 200 and not Team.objects.filter(name="new-team").exists()
    assert response.context["adminform"].form.errors["description"] == [INVISIBLE.format(char=RLO_NAME)]
