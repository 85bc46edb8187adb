"""QA walkthrough fix on /account/tokens/: as the README says, site admins see and revoke anyone's
tokens there (every user's, or one user's with ?user=, as GET /api/v1/tokens takes it); anyone
else still sees their own only."""

import re

import pytest
from django.contrib.auth import get_user_model

from teams.api import NO_SUCH_USER, ONLY_ADMINS_LIST_OTHERS
from teams.models import ApiToken, AuditEvent, EventKind
from teams.services import do_create_token

PAGE = "/account/tokens/"


@pytest.fixture
def tokens(demo) -> dict[str, ApiToken]:
    users = get_user_model().objects
    return {
        name: do_create_token(user=users.get(username=name), name=f"{name}-laptop", expires_in_days=None)[0]
        for name in ("alice", "bob", "ops")
    }


def everyone_rows(html: str) -> set[int]:
    return {int(pk) for pk in re.findall(r'<tr id="any-token-(\d+)"', html)}


def test_an_admin_sees_every_users_tokens_with_their_owner(logged_in, tokens):
    html = logged_in("ops").get(PAGE).content.decode()
    assert everyone_rows(html) == {token.pk for token in tokens.values()}
    bobs = re.search(rf'<tr id="any-token-{tokens["bob"].pk}">.*?</tr>', html, re.S)[0]
    assert ">bob</a>" in bobs and "bob-laptop" in bobs and 'name="revoke"' in bobs
    assert f'id="token-{tokens["ops"].pk}"' in html  # their own list is still there
    assert f'id="token-{tokens["bob"].pk}"' not in html


def test_an_admin_narrows_the_list_to_one_user(logged_in, tokens):
    response = logged_in("ops").get(f"{PAGE}?user=bob")
    assert response.status_code == 200 and everyone_rows(response.content.decode()) == {tokens["bob"].pk}
    missing = logged_in("ops").get(f"{PAGE}?user=nobody")
    assert (missing.status_code, missing.content.decode()) == (404, NO_SUCH_USER.format(name="nobody"))


def test_an_admin_revokes_another_users_token_from_the_list_and_stays_on_it(logged_in, tokens):
    bobs = tokens["bob"]
    response = logged_in("ops").post(PAGE, {"revoke": bobs.pk, "user": "bob"}, follow=True)
    assert response.redirect_chain == [(f"{PAGE}?user=bob", 302)]
    bobs.refresh_from_db()
    assert bobs.revoked_at is not None
    assert f"Token {bobs.hint}… (bob-laptop) of bob revoked" in response.content.decode()
    (event,) = AuditEvent.objects.filter(kind=EventKind.SECURITY, reason="API_TOKEN_REVOKED")
    assert (event.actor_name, event.data["user"]) == ("ops", "bob")


def test_anyone_else_still_sees_their_own_tokens_only(logged_in, tokens):
    html = logged_in("alice").get(PAGE).content.decode()
    assert f'id="token-{tokens["alice"].pk}"' in html
    assert 'id="all-tokens"' not in html and not everyone_rows(html)
    assert f'id="token-{tokens["bob"].pk}"' not in html
    assert logged_in("alice").get(f"{PAGE}?user=alice").status_code == 200
    refused = logged_in("alice").get(f"{PAGE}?user=bob")
    assert (refused.status_code, refused.content.decode()) == (403, ONLY_ADMINS_LIST_OTHERS)
