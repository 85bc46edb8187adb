"""secret_env: write-only values, encrypted at rest, delivered only in the heartbeat reply of
the node that runs the task, "***" everywhere else; and `owner` in a submitted spec."""

import logging
import sys

import pytest
from cryptography.fernet import Fernet
from django.core.checks import registry
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.test import Client
from django.utils import timezone
from django.utils.html import escape
from django.views.debug import ExceptionReporter
from rest_framework.test import APIClient

from scheduling import secrets, services
from scheduling.assignments import assignment_env
from scheduling.leader.worker import run_pass
from scheduling.models import Job, Node, SchedulerLease, Task
from scheduling.spec import (
    IN_ENV_AND_SECRET_ENV,
    OWNER_NOT_CALLER,
    RESERVED_ENV,
    SECRET_BLANK,
    SECRET_IS_MASK,
    spec_digest,
)
from scheduling.web.submit_page import SECRET_NAMES_INPUT, SECRET_NOT_KEY_VALUE, SECRET_VALUES_NOT_SHOWN
from teams.models import AuditEvent
from tests.conftest import make_spec
from tests.nodes import cordon

SECRET = "wandb-8f14e45fceea167a5a36dedd4bea2543"
OTHER_SECRET = "wandb-c9f0f895fb98ab9159f51fd0297e236d"
KEY_A, KEY_B = Fernet.generate_key().decode(), Fernet.generate_key().decode()
JOIN = "join-secret"
INVENTORY = {
    "zone": "z1",
    "rack": "z1-r1",
    "gpu_type": "H100",
    "gpu_count": 8,
    "cpu_count": 192,
    "memory_gb": 2048,
    "labels": {"ib": "ndr400"},
    "address": "10.0.0.1",
}


def with_secret(**overrides) -> dict:
    return make_spec(secret_env={"WANDB_API_KEY": SECRET}, **overrides)


def every_row_as_text() -> str:
    """Every job, task and event row as Postgres prints it: what a database dump would hold."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT row_to_json(j)::text FROM scheduling_job j UNION ALL "
            "SELECT row_to_json(t)::text FROM scheduling_task t UNION ALL "
            "SELECT row_to_json(e)::text FROM scheduling_jobevent e"
        )
        return "\n".join(row[0] for row in cursor.fetchall())


# --- storage -------------------------------------------------------------------------------


def test_the_value_is_stored_encrypted_and_the_spec_keeps_only_the_name(api, caplog):
    caplog.set_level(logging.DEBUG)
    response = api("alice").post("/api/v1/jobs", with_secret(), format="json")

    assert response.status_code == 201
    assert response.json()["spec"]["secret_env"] == {"WANDB_API_KEY": "***"}
    job = Job.objects.get()
    assert job.spec["secret_env"] == {"WANDB_API_KEY": "***"} and job.env == {"WANDB_PROJECT": "llama-70b"}
    assert job.secret_env_ciphertext and SECRET not in job.secret_env_ciphertext
    assert secrets.decrypt_env(job.secret_env_ciphertext) == {"WANDB_API_KEY": SECRET}
    assert "WANDB_API_KEY" in every_row_as_text() and SECRET not in every_row_as_text()
    assert SECRET not in caplog.text


def test_the_admin_shows_neither_the_value_nor_the_ciphertext(api):
    api("alice").post("/api/v1/jobs", with_secret(), format="json")
    job = Job.objects.get()
    admin = Client()
    assert admin.login(username="ops", password="demo")

    page = admin.get(f"/admin/scheduling/job/{job.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "WANDB_API_KEY" in html and SECRET not in html
    assert "secret_env_ciphertext" not in html and job.secret_env_ciphertext not in html


def test_a_crash_report_lists_no_secret(api, user, monkeypatch):
    """DEBUG's error page and the mails to ADMINS print each frame's variables."""
    team, spec = services.check_job_submission(user=user("alice"), data=with_secret())
    monkeypatch.setattr(services, "_create_job", lambda **kwargs: 1 / 0)
    try:
        services.do_submit_job(user=user("alice"), team=team, spec=spec)
    except ZeroDivisionError:
        frames = ExceptionReporter(None, *sys.exc_info()).get_traceback_frames()
    ours = [frame for frame in frames if "/scheduling/" in frame["filename"]]  # not this test's own
    assert [frame["function"] for frame in ours] == ["do_submit_job"]
    assert dict(ours[0]["vars"])["secret_values"] == "********************" and SECRET not in repr(ours)


def test_the_submit_page_keeps_its_secret_inputs_out_of_crash_reports(alice):
    response = post(alice, "dry_run", submit_form(secret_env=f"WANDB_API_KEY={SECRET}"))
    assert response.wsgi_request.sensitive_post_parameters == ("secret_env", "yaml")


# --- who sees it ---------------------------------------------------------------------------


@pytest.fixture
def two_agents(demo, settings, fresh_liveness):
    """Nodes z1-r1-h100-01 and -02 ready through the agent API, every other node cordoned."""
    settings.MLQ_AGENT_JOIN_TOKEN = JOIN
    SchedulerLease.objects.filter(pk=1).update(epoch=2, renewed_at=timezone.now())
    clients = {}
    for name in ("z1-r1-h100-01", "z1-r1-h100-02"):
        client = APIClient()
        joined = client.post(
            "/api/v1/agents/register", {"name": name, **INVENTORY}, format="json", HTTP_AUTHORIZATION=f"Bearer {JOIN}"
        )
        assert joined.status_code == 201, joined.json()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {joined.json()['token']}")
        assert client.post(f"/api/v1/agents/{name}/heartbeat", {"tasks": []}, format="json").status_code == 200
        clients[name] = client
    cordon(Node.objects.exclude(name__in=clients))
    return clients


def beat(client: APIClient, name: str):
    response = client.post(f"/api/v1/agents/{name}/heartbeat", {"tasks": []}, format="json")
    assert response.status_code == 200
    return response


def test_only_the_assigned_nodes_heartbeat_reply_carries_the_value(api, two_agents, caplog):
    caplog.set_level(logging.DEBUG)
    job_id = api("alice").post("/api/v1/jobs", with_secret(resources={"gpu_count": 8}), format="json").json()["id"]
    run_pass(epoch=2)
    assigned = Task.objects.select_related("node").get(job_id=job_id).node.name
    [other] = set(two_agents) - {assigned}

    [assignment] = beat(two_agents[assigned], assigned).json()["assignments"]
    assert assignment["job_id"] == job_id
    assert (assignment["env"]["WANDB_API_KEY"], assignment["env"]["WANDB_PROJECT"]) == (SECRET, "llama-70b")

    assert SECRET not in beat(two_agents[other], other).content.decode()
    alice, rita = api("alice"), api("rita")
    seen_elsewhere = [
        alice.get(f"/api/v1/jobs/{job_id}"),
        rita.get(f"/api/v1/jobs/{job_id}"),
        alice.get("/api/v1/jobs"),
        alice.get(f"/api/v1/jobs/{job_id}/events"),
        alice.get("/api/v1/queue"),
        api("ops").get("/api/v1/nodes"),
    ]
    assert [r.status_code for r in seen_elsewhere] == [200] * 6
    assert all(SECRET not in r.content.decode() for r in seen_elsewhere)
    assert SECRET not in every_row_as_text() and SECRET not in caplog.text


def test_the_job_page_and_its_panel_show_the_name_with_stars(api):
    job_id = api("alice").post("/api/v1/jobs", with_secret(), format="json").json()["id"]
    rita = Client()
    assert rita.login(username="rita", password="demo")

    page = rita.get(f"/jobs/{job_id}/").content.decode()
    panel = rita.get(f"/jobs/{job_id}/panel/").content.decode()
    assert "WANDB_API_KEY: &#x27;***&#x27;" in page
    assert SECRET not in page and SECRET not in panel


def test_assignment_env_merges_the_secret_under_mlqueues_own_variables(api):
    api("alice").post("/api/v1/jobs", make_spec(secret_env={"HF_TOKEN": SECRET}), format="json")
    job = Job.objects.get()
    # Submitted before RANK and the like were refused at submit (tests/integration/test_task_env_qa5.py).
    job.secret_env_ciphertext = secrets.encrypt_env({"HF_TOKEN": SECRET, "RANK": "spoofed"})
    env = assignment_env(job.tasks.get(rank=0), job=job, master_node="n1")
    assert (env["HF_TOKEN"], env["RANK"], env["WANDB_PROJECT"]) == (SECRET, "0", "llama-70b")


# --- idempotent submit ---------------------------------------------------------------------


def test_a_resubmit_with_the_same_secret_is_the_same_job_and_another_secret_a_conflict(api):
    client = api("alice")
    first = client.post("/api/v1/jobs", with_secret(), format="json")
    again = client.post("/api/v1/jobs", with_secret(), format="json")
    other = client.post("/api/v1/jobs", make_spec(secret_env={"WANDB_API_KEY": OTHER_SECRET}), format="json")
    none = client.post("/api/v1/jobs", make_spec(), format="json")

    job = Job.objects.get()
    assert (first.status_code, again.status_code, other.status_code, none.status_code) == (201, 200, 409, 409)
    assert again.json()["id"] == job.pk
    assert other.json()["detail"] == services.SPEC_CONFLICT.format(
        team="research-foundation-models", job_id=job.pk, client_job_id="llama-70b-run-47"
    )


def test_the_digest_is_keyed_so_it_tells_nothing_about_the_value(api, settings):
    """An HMAC: without the key, the digest of a guessed value cannot be checked against it."""
    spec = {**make_spec(), "secret_env": {"WANDB_API_KEY": "***"}}
    settings.MLQ_SECRET_ENV_KEYS = [KEY_A]
    under_a = spec_digest(spec, secrets.env_macs({"WANDB_API_KEY": SECRET})[0])
    settings.MLQ_SECRET_ENV_KEYS = [KEY_B]
    under_b = spec_digest(spec, secrets.env_macs({"WANDB_API_KEY": SECRET})[0])
    assert under_a != under_b
    assert spec_digest(make_spec()) == spec_digest({**make_spec(), "secret_env": {}})  # old jobs keep theirs


def test_keys_rotate_the_old_key_still_decrypts_and_matches_and_a_dropped_key_fails_safe(api, settings, caplog):
    settings.MLQ_SECRET_ENV_KEYS = [KEY_A]
    client = api("alice")
    assert client.post("/api/v1/jobs", with_secret(), format="json").status_code == 201
    job = Job.objects.get()

    settings.MLQ_SECRET_ENV_KEYS = f"{KEY_B},{KEY_A}"  # a new key first, the old one kept
    assert client.post("/api/v1/jobs", with_secret(), format="json").status_code == 200
    assert assignment_env(job.tasks.get(rank=0), job=job, master_node="n1")["WANDB_API_KEY"] == SECRET
    assert Fernet(KEY_B).decrypt(secrets.encrypt_env({"A": "1"}).encode()) == b'{"A": "1"}'

    settings.MLQ_SECRET_ENV_KEYS = [KEY_B]  # dropped too early: the task starts without it, loudly
    env = assignment_env(job.tasks.get(rank=0), job=job, master_node="n1")
    assert "WANDB_API_KEY" not in env and env["RANK"] == "0"
    assert secrets.UNREADABLE.format(job_id=job.pk) in caplog.text and SECRET not in caplog.text


# --- settings ------------------------------------------------------------------------------


def test_a_bad_key_is_improperly_configured_and_a_check_error(settings):
    settings.MLQ_SECRET_ENV_KEYS = [KEY_A, "not-a-key"]
    with pytest.raises(ImproperlyConfigured) as raised:
        secrets.encrypt_env({"A": "1"})
    assert str(raised.value) == secrets.BAD_KEY.format(number=2)
    [error] = secrets.check_secret_env_keys()
    assert (error.id, error.msg) == ("mlqueue.E001", secrets.BAD_KEY.format(number=2))


def test_without_keys_the_demo_works_and_check_deploy_warns(settings):
    settings.MLQ_SECRET_ENV_KEYS = []
    assert secrets.decrypt_env(secrets.encrypt_env({"A": "1"})) == {"A": "1"}
    [warning] = secrets.check_secret_env_keys_set()
    assert (warning.id, warning.msg) == ("mlqueue.W001", secrets.NO_KEYS_HINT)
    assert secrets.check_secret_env_keys_set in registry.registry.get_checks(include_deployment_checks=True)
    assert secrets.check_secret_env_keys_set not in registry.registry.get_checks(include_deployment_checks=False)

    settings.MLQ_SECRET_ENV_KEYS = [KEY_A]
    assert secrets.check_secret_env_keys_set() == [] and secrets.check_secret_env_keys() == []


# --- bad secret_env and owner --------------------------------------------------------------


@pytest.mark.parametrize(
    "body, field, message",
    [
        (make_spec(secret_env={"MLQ_TOKEN": "x"}), "secret_env", RESERVED_ENV.format(name="MLQ_TOKEN")),
        (
            make_spec(secret_env={"WANDB_PROJECT": "x"}),
            "secret_env",
            IN_ENV_AND_SECRET_ENV.format(name="WANDB_PROJECT"),
        ),
        (make_spec(secret_env={"WANDB_API_KEY": "***"}), "secret_env", SECRET_IS_MASK.format(name="WANDB_API_KEY")),
        (make_spec(secret_env={"WANDB_API_KEY": " "}), "secret_env", SECRET_BLANK.format(name="WANDB_API_KEY")),
        (
            make_spec(secret_env={"1BAD": "x"}),
            "secret_env",
            "'1BAD' is not a valid name: letters, digits and underscores, not starting with a digit.",
        ),
        (make_spec(secret_env={"A": 7}), "secret_env.A", "must be a string, not int."),
        (
            make_spec(secret_env={"A": "x" * 8193}),
            "secret_env.A",
            "Ensure this field has no more than 8192 characters.",
        ),
        (make_spec(secret_env=["A=x"]), "secret_env", 'Expected a dictionary of items but got type "list".'),
        (make_spec(owner="someone@example.com"), "owner", OWNER_NOT_CALLER.format(owner="someone@example.com")),
        (make_spec(owner="bob"), "owner", OWNER_NOT_CALLER.format(owner="bob")),
    ],
    ids=[
        "reserved",
        "also in env",
        "the mask",
        "blank",
        "bad name",
        "not a string",
        "too long",
        "a list",
        "someone else's email",
        "someone else's name",
    ],
)
def test_bad_secret_env_and_owner_are_refused_naming_the_field(api, body, field, message):
    response = api("alice").post("/api/v1/jobs", body, format="json")
    assert response.status_code == 400
    assert response.json()["fields"][field] == [message]
    assert (Job.objects.count(), AuditEvent.objects.count()) == (0, 0)


def test_a_secret_value_is_never_quoted_in_an_error(api):
    response = api("alice").post("/api/v1/jobs", make_spec(secret_env={"WANDB_PROJECT": SECRET}), format="json")
    assert response.status_code == 400 and SECRET not in response.content.decode()


@pytest.mark.parametrize("owner", ["alice", "alice@example.com", "Alice@Example.COM"])
def test_owner_naming_the_caller_is_accepted_and_not_part_of_the_spec(api, owner):
    client = api("alice")
    created = client.post("/api/v1/jobs", make_spec(owner=owner), format="json")
    assert created.status_code == 201 and "owner" not in created.json()["spec"]
    assert created.json()["owner"] == "alice"
    assert client.post("/api/v1/jobs", make_spec(), format="json").status_code == 200


# --- the submit page -----------------------------------------------------------------------

URL = "/jobs/new/"


@pytest.fixture
def alice(demo) -> Client:
    client = Client()
    assert client.login(username="alice", password="demo")
    return client


def submit_form(**changes) -> dict:
    """alice's form as the page draws it, with a 1-GPU job and the given inputs."""
    form = {
        "team": "research-foundation-models",
        "command": "python\ntrain.py",
        "resources.gpu_count": "1",
        "resources.gpu_type": "H100",
        "max_runtime_hours": "24",
    }
    return {**form, **changes}


def post(client: Client, action: str, form: dict):
    headers = {} if action == "submit" else {"HX-Request": "true"}
    return client.post(URL, {**form, "action": action}, headers=headers)


def test_the_form_submits_a_secret_and_the_job_keeps_only_its_name(alice):
    response = post(alice, "submit", submit_form(secret_env=f"WANDB_API_KEY={SECRET}\n"))

    job = Job.objects.get()
    assert response.status_code == 302 and response.url == f"/jobs/{job.pk}/"
    assert job.spec["secret_env"] == {"WANDB_API_KEY": "***"}
    assert secrets.decrypt_env(job.secret_env_ciphertext) == {"WANDB_API_KEY": SECRET}


def test_the_form_keeps_a_secrets_spaces_as_the_api_does(alice):
    """QA: the box trimmed values ("A=  sp ace  " stored "sp ace"); docs/secrets.md says values
    are kept exactly as given. The browser's CRLF line ends are not part of a value."""
    post(alice, "submit", submit_form(secret_env="PASSPHRASE=  sp ace  \r\n TOKEN =abc\r\n"))
    job = Job.objects.get()
    assert secrets.decrypt_env(job.secret_env_ciphertext) == {"PASSPHRASE": "  sp ace  ", "TOKEN": "abc"}


@pytest.mark.parametrize("action", ["submit", "dry_run", "to_yaml"])
def test_a_form_shown_again_never_echoes_the_value_and_asks_for_it_again(alice, action):
    form = submit_form(secret_env=f"WANDB_API_KEY={SECRET}", **{"resources.gpu_count": "abc"})
    response = post(alice, action, form)

    html = response.content.decode()
    assert response.status_code == 200 and SECRET not in html
    assert f'name="{SECRET_NAMES_INPUT}" value="WANDB_API_KEY" checked' in html
    assert "Type the value of each ticked name again" in html
    assert Job.objects.count() == 0
    if action == "to_yaml":
        assert "WANDB_API_KEY: &#x27;***&#x27;" in html


def test_a_ticked_name_without_a_value_is_refused_by_name_and_a_typed_value_goes_through(alice):
    refused = post(alice, "submit", submit_form(**{SECRET_NAMES_INPUT: "WANDB_API_KEY"}))
    assert refused.status_code == 200 and Job.objects.count() == 0
    assert refused.context["summary"] == [f"secret_env: {SECRET_IS_MASK.format(name='WANDB_API_KEY')}"]

    dropped = post(alice, "submit", submit_form(client_job_id="no-secret"))  # unticked: dropped
    assert dropped.status_code == 302 and Job.objects.get().spec["secret_env"] == {}

    typed = post(
        alice,
        "submit",
        submit_form(
            client_job_id="typed", secret_env=f"WANDB_API_KEY={SECRET}", **{SECRET_NAMES_INPUT: "WANDB_API_KEY"}
        ),
    )
    job = Job.objects.get(client_job_id="typed")
    assert typed.status_code == 302 and secrets.decrypt_env(job.secret_env_ciphertext) == {"WANDB_API_KEY": SECRET}


def test_yaml_with_a_value_is_taken_as_names_only_and_yaml_with_stars_cannot_submit_stars(alice):
    typed_yaml = f"team: research-foundation-models\ncommand: [a]\nsecret_env: {{WANDB_API_KEY: {SECRET}}}\n"
    response = post(alice, "from_yaml", submit_form(yaml=typed_yaml))
    html = response.content.decode()
    assert SECRET not in html and 'value="WANDB_API_KEY" checked' in html
    assert response.context["state"].yaml_errors == [SECRET_VALUES_NOT_SHOWN]

    exported = "team: research-foundation-models\ncommand: [a]\nsecret_env: {WANDB_API_KEY: '***'}\n"
    imported = post(alice, "from_yaml", submit_form(yaml=exported))
    assert imported.context["state"].yaml_errors == []
    refused = post(alice, "submit", submit_form(**{SECRET_NAMES_INPUT: "WANDB_API_KEY"}))
    assert escape(SECRET_IS_MASK.format(name="WANDB_API_KEY")) in refused.content.decode()
    assert Job.objects.count() == 0


def test_a_line_that_is_not_name_value_is_refused_without_quoting_it(alice):
    response = post(alice, "dry_run", submit_form(secret_env=f"A=1\n{SECRET}"))
    html = response.content.decode()
    assert SECRET not in html
    assert escape(SECRET_NOT_KEY_VALUE.format(line=2)) in html


def test_clone_keeps_the_names_and_asks_for_the_values_again(api, alice):
    job_id = api("alice").post("/api/v1/jobs", with_secret(), format="json").json()["id"]
    response = alice.get(f"{URL}?clone={job_id}")

    html = response.content.decode()
    assert response.status_code == 200 and SECRET not in html
    assert f'name="{SECRET_NAMES_INPUT}" value="WANDB_API_KEY" checked' in html
    assert "Type the value of each ticked name again" in html
    assert "WANDB_API_KEY: &#x27;***&#x27;" in html  # the YAML view
