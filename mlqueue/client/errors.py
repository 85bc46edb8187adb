"""The one exception of the SDK."""


class MlqError(Exception):
    """A request the server refused (or could not be made): the API's `detail` and `fields`."""

    def __init__(
        self, status: int, detail: str, fields: dict[str, list[str]] | None = None, *, retry_after: float | None = None
    ):
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.fields = fields or {}
        self.retry_after = retry_after  # a 429's Retry-After, in seconds

    def lines(self) -> list[str]:
        """The detail, then each field's messages as `field: message` (the detail's own line once)."""
        out = [self.detail]
        for field, messages in self.fields.items():
            for message in messages if isinstance(messages, list) else [messages]:
                line = f"{field}: {message}"
                if line not in out:
                    out.append(line)
        return out
