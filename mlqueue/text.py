"""Text people read as names (job, team, node and label names): refused when it holds an
invisible or control character, which can make one name read as another. Shared by every app."""

import unicodedata

from django.core.exceptions import ValidationError as DjangoValidationError

INVISIBLE = "must not contain {char}: invisible and control characters can make text read as something else."
# Control characters, format characters (bidi overrides U+202A..U+202E and U+2066..U+2069,
# zero-width spaces and joiners, soft hyphen), surrogates, and line and paragraph separators.
INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def invisible_char(value: str) -> str | None:
    """The first invisible or control character in `value`, described ("U+202E RIGHT-TO-LEFT
    OVERRIDE"), or None. Shown by code point, never as itself, so a message cannot be spoofed."""
    for char in value:
        if unicodedata.category(char) in INVISIBLE_CATEGORIES:
            return f"U+{ord(char):04X} {unicodedata.name(char, 'CONTROL CHARACTER')}"
    return None


def validate_printable(value: str) -> None:
    """The same rule as a Django validator, for model fields (team names and descriptions)."""
    char = invisible_char(value)
    if char is not None:
        raise DjangoValidationError(INVISIBLE.format(char=char), code="invisible")
