"""`revoke_join_token mlqj_` named the real reason (the hint is shorter than the 8 characters a
hint needs), not "0 match" while four tokens start with it."""

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from agents.management.commands.revoke_join_token import HINT_TOO_SHORT, NO_SINGLE_MATCH
from agents.models import JoinToken
from agents.tokens import do_create_join_token


def revoke(hint: str) -> str:
    out = io.StringIO()
    call_command("revoke_join_token", hint, stdout=out)
    return out.getvalue()


def test_a_hint_too_short_says_so(db):
    for _ in range(4):
        do_create_join_token(created_by="test")
    with pytest.raises(CommandError) as exc:
        revoke("mlqj_")
    assert str(exc.value) == HINT_TOO_SHORT.format(hint="mlqj_", least=8)
    assert "too short" in str(exc.value) and "0 match" not in str(exc.value)
    assert not JoinToken.objects.filter(revoked_at__isnull=False).exists()


def test_a_long_enough_hint_matching_none_says_how_many_matched(db):
    token, _ = do_create_join_token(created_by="test")
    with pytest.raises(CommandError) as exc:
        revoke("mlqj_nothing")
    assert str(exc.value) == NO_SINGLE_MATCH.format(hint="mlqj_nothing", count=0)
    assert revoke(token.hint[:8]) == f"revoked join token {token.hint}…\n"
