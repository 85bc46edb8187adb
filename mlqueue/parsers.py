"""JSON bodies with a size cap. DRF reads the request stream itself, so Django's
DATA_UPLOAD_MAX_MEMORY_SIZE never sees a JSON body; this parser enforces it."""
import json

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from mlqueue.errors import RequestTooLarge


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


class LimitedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise RequestTooLarge(f"request body is over the limit of {limit} bytes")
        try:
            return json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ParseError(f"body: malformed JSON ({exc})") from None
