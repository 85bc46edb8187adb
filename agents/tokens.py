"""Who may register a node: join tokens (rows an admin creates, bounded in time and uses,
revocable; plus the MLQ_AGENT_JOIN_TOKEN setting for bootstrap and the demo), and each node's
own token, which only its agent holds. Every change is audited in the event log."""

import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db.models import F, Q
from django.utils import timezone

from agents.models import JoinToken
from scheduling.models import Node
from teams.models import AuditEvent, EventKind, hash_token

BOOTSTRAP = "the MLQ_AGENT_JOIN_TOKEN setting"
WRONG_JOIN_TOKEN = "invalid, expired, used-up or revoked join token."
NODE_TOKEN_PREFIX = "mlqn_"


@dataclass(frozen=True)
class JoinCredential:
    """A join token that was accepted: a row, or the bootstrap setting (row None)."""

    row: JoinToken | None

    @property
    def description(self) -> str:
        return BOOTSTRAP if self.row is None else f"join token {self.row.hint}… ({self.row.name or 'unnamed'})"


def audit(
    *, reason: str, message: str, actor=None, actor_name: str, node: Node | None = None, data=None, now=None
) -> None:
    AuditEvent.objects.create(
        kind=EventKind.SECURITY,
        node=node,
        actor=actor,
        actor_name=actor_name,
        reason=reason,
        message=message,
        data=data or {},
        created_at=now or timezone.now(),
    )


def do_create_join_token(
    *, created_by: str, name: str = "", expires_at: datetime | None = None, max_uses: int | None = None, actor=None
) -> tuple[JoinToken, str]:
    """A new join token; the raw value is returned once and only its digest is kept."""
    raw = JoinToken.PREFIX + secrets.token_urlsafe(32)
    token = JoinToken.objects.create(
        name=name,
        digest=hash_token(raw),
        hint=raw[:12],
        created_by=created_by,
        expires_at=expires_at,
        max_uses=max_uses,
    )
    audit(
        reason="JOIN_TOKEN_CREATED",
        actor=actor,
        actor_name=created_by,
        message=f"join token {token.hint}… ({name or 'unnamed'}) created: "
        f"expires {expires_at.isoformat() if expires_at else 'never'}, "
        f"{max_uses if max_uses is not None else 'unlimited'} use(s)",
        data={
            "join_token": token.pk,
            "expires_at": expires_at.isoformat() if expires_at else None,
            "max_uses": max_uses,
        },
    )
    return token, raw


def do_revoke_join_token(*, token: JoinToken, revoked_by: str, actor=None) -> bool:
    """False when it was already revoked."""
    if not JoinToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now()):
        return False
    audit(
        reason="JOIN_TOKEN_REVOKED",
        actor=actor,
        actor_name=revoked_by,
        message=f"join token {token.hint}… ({token.name or 'unnamed'}) revoked",
        data={"join_token": token.pk},
    )
    return True


def usable_join_tokens(now) -> "Q":
    return (
        Q(revoked_at__isnull=True)
        & (Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        & (Q(max_uses__isnull=True) | Q(uses__lt=F("max_uses")))
    )


def check_join_token(raw: str, *, now) -> JoinCredential | None:
    """The join credential `raw` is, or None. The bootstrap setting is accepted for as long as it
    is set: never listed, counted or revocable, hence `check --deploy`'s warning when it is
    short (mlqueue.W003, mlqueue/checks.py)."""
    bootstrap = settings.MLQ_AGENT_JOIN_TOKEN
    if bootstrap and hmac.compare_digest(raw.encode(), bootstrap.encode()):
        return JoinCredential(None)
    row = JoinToken.objects.filter(usable_join_tokens(now), digest=hash_token(raw)).first()
    return JoinCredential(row) if row is not None else None


def do_use_join_token(credential: JoinCredential, *, now) -> bool:
    """Count one use; False when the token was used up or revoked meanwhile (a race)."""
    if credential.row is None:
        return True
    return bool(
        JoinToken.objects.filter(usable_join_tokens(now), pk=credential.row.pk).update(
            uses=F("uses") + 1, last_used_at=now
        )
    )


def new_node_token() -> str:
    return NODE_TOKEN_PREFIX + secrets.token_urlsafe(32)


def node_by_token(raw: str) -> Node | None:
    return Node.objects.filter(token_digest=hash_token(raw)).exclude(token_digest="").first() if raw else None
