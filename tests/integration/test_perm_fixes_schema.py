"""The OpenAPI schema documents the 403 of every lead- or admin-only operation, as it does for
the job and schedule actions (found by QA: none of these listed one)."""

import pytest

LEAD_OR_ADMIN_ONLY = [
    ("/api/v1/teams/{name}/quotas", "patch"),
    ("/api/v1/teams/{name}/events", "get"),
    ("/api/v1/nodes/{name}/cordon", "post"),
    ("/api/v1/nodes/{name}/drain", "post"),
    ("/api/v1/nodes/{name}/uncordon", "post"),
    ("/api/v1/nodes/{name}/reset-token", "post"),
    ("/api/v1/nodes/{name}/reclaim-notice", "post"),
    ("/api/v1/nodes/{name}/include-gpus", "post"),
    ("/api/v1/nodes/bulk", "post"),
    ("/api/v1/maintenance", "get"),
    ("/api/v1/maintenance", "post"),
    ("/api/v1/maintenance/{window_id}", "get"),
    ("/api/v1/maintenance/{window_id}", "patch"),
    ("/api/v1/maintenance/{window_id}", "delete"),
    ("/api/v1/prices", "post"),
    ("/api/v1/prices/{price_id}", "delete"),
    ("/api/v1/what-if", "post"),
]


@pytest.fixture
def document(api) -> dict:
    response = api("alice").get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return response.json()


@pytest.fixture
def schema(document) -> dict:
    return {path.rstrip("/"): operations for path, operations in document["paths"].items()}


def test_every_lead_or_admin_only_operation_documents_its_403(schema):
    missing = [
        f"{method.upper()} {path}"
        for path, method in LEAD_OR_ADMIN_ONLY
        if "403" not in schema[path][method]["responses"]
    ]
    assert missing == []


def test_the_token_create_documents_its_cap_and_its_400(schema):
    operation = schema["/api/v1/tokens"]["post"]
    assert "expires no later than that token" in operation["description"]
    assert "expires_in_days" in operation["responses"]["400"]["description"]


def test_a_job_change_documents_its_reason(schema, document):
    body = schema["/api/v1/jobs/{job_id}"]["patch"]["requestBody"]["content"]["application/json"]["schema"]
    component = document["components"]["schemas"][body["$ref"].rsplit("/", 1)[1]]
    assert component["properties"]["reason"]["maxLength"] == 500
