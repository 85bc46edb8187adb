"""Content negotiation for every API view: `?format=` chooses the renderer, whatever the Accept
header says (a CLI asks for JSON by default), and a format the view does not write is a 400
naming `format`, where DRF answered 404 "Not found." (`GET /api/v1/jobs?format=csv`: the jobs
list has no CSV; only `/api/v1/usage` has)."""

from rest_framework.exceptions import NotAcceptable, ValidationError
from rest_framework.negotiation import DefaultContentNegotiation

BAD_FORMAT = "format is {formats}; got {value!r}."


class FormatNegotiation(DefaultContentNegotiation):
    def select_renderer(self, request, renderers, format_suffix=None):
        wanted = format_suffix or request.query_params.get(self.settings.URL_FORMAT_OVERRIDE)
        if not wanted:
            return super().select_renderer(request, renderers, format_suffix)
        # Of the renderers of that format, the Accept header chooses if it names one (the schema
        # view has two JSON ones: application/json for a JSON client), else the first does.
        if matching := [renderer for renderer in renderers if renderer.format == wanted]:
            try:
                return super().select_renderer(request, matching, format_suffix)
            except NotAcceptable:
                return matching[0], matching[0].media_type
        formats = " or ".join(dict.fromkeys(renderer.format for renderer in renderers))
        raise ValidationError({"format": [BAD_FORMAT.format(formats=formats, value=wanted)]})
