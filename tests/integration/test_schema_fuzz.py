"""schemathesis against /api/schema/, in-process (the Django WSGI application on the test
database, no server): valid and invalid requests to every operation, as a member (alice), as
an admin (ops) and, for the agent API, as a registered node (and the join token for register).
None may be answered with a 5xx. bench/fuzz.py runs the same, longer."""

import pytest
from django.core.cache import cache
from django.core.management import call_command

from bench.fuzz import JOIN_TOKEN, JoinTokenForRegister, demo_world, fuzz, in_process_send, load_schema_in_process
from mlqueue.wsgi import application

CASES = 400


@pytest.mark.django_db(transaction=True)  # a request that fails in the database must not abort the rest
def test_no_generated_request_gets_a_server_error(settings):
    settings.MLQ_AGENT_JOIN_TOKEN = JOIN_TOKEN
    # a followed log of a running job streams until this bound; in-process, the response is read whole
    settings.MLQ_LOG_FOLLOW_MAX_S = 0.5
    cache.clear()
    call_command("seed_demo", "--force", stdout=open("/dev/null", "w"))
    identities, real_paths = demo_world()
    schema = load_schema_in_process(application, identities[0].authorization)

    figures = fuzz(
        schema,
        identities=identities,
        real_paths=real_paths,
        cases=CASES,
        derandomize=True,
        send=JoinTokenForRegister(in_process_send(application)),
    )

    assert figures.server_errors == 0, figures.failures
    assert figures.cases >= CASES // 2, figures.as_dict()
    assert figures.by_status_class.get("2xx", 0) > 0 and figures.by_status_class.get("4xx", 0) > 0
