"""Tells drf-spectacular how the API authenticates, so /api/docs/ can send a token."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "teams.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "a token from `POST /api/v1/tokens`, /account/tokens/ or `manage.py create_token USER`",
        }
