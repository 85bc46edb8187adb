"""The OpenAPI schema and its docs page, served from local static files (no CDN)."""

import re


def test_schema_lists_the_public_endpoints(api):
    response = api("alice").get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    paths = set(response.json()["paths"])
    assert {
        "/api/v1/jobs",
        "/api/v1/jobs/{job_id}",
        "/api/v1/jobs/{job_id}/events",
        "/api/v1/jobs/{job_id}/cancel",
        "/api/v1/teams",
        "/api/v1/teams/{name}/quotas",
        "/api/v1/nodes",
    } <= {p.rstrip("/") for p in paths} | paths
    assert response.json()["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"


def test_docs_page_loads_its_assets_locally(api):
    response = api("alice").get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert assets and all(not a.startswith("http") or "127.0.0.1" in a for a in assets), assets
    assert any("/static/drf_spectacular_sidecar/" in a for a in assets)
