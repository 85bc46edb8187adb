"""API exceptions the services raise; mlqueue.api_errors renders them."""

from rest_framework import exceptions, status

BODY_TOO_LARGE = "request body is over the limit of {limit} bytes"
SERVER_ERROR = "internal server error: the request failed on the server (see the server's log)"


class FieldPermissionDenied(exceptions.PermissionDenied):
    """A 403 that still names the field at fault (e.g. a team the caller is not in)."""

    def __init__(self, field: str, message: str, *, also: dict[str, list[str]] | None = None):
        super().__init__(message)
        self.field = field
        # Every field refused where there are several (a batch's specs), this one included.
        self.fields = also or {field: [str(message)]}


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "conflict"
    default_code = "conflict"


class RequestTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "request body too large"
    default_code = "too_large"
