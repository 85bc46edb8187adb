"""Limits on password guessing: per user name and per client address.

Every place that checks a password goes through here: the web login and the admin login (the
forms below); `authenticate_within_limits` is for the password-to-token exchange
(`POST /api/v1/tokens`, teams/api.py). Past
`MLQ_LOGIN_MAX_FAILURES` failures for one user name, or `MLQ_LOGIN_MAX_FAILURES_PER_ADDRESS`
from one address, within `MLQ_LOGIN_WINDOW_S`, both are locked for `MLQ_LOGIN_WINDOW_S`: further
attempts get 429 and their password is not even checked, so a locked account cannot be guessed
at any speed. A success clears its user name's count, never its address's: an attacker with
one valid account must not be able to reset the address's count between guesses.

Counters live in the Django cache (Redis in production): losing them only resets the limits.
Each is a fixed window plus the previous one weighted by how much of it still overlaps the
last `MLQ_LOGIN_WINDOW_S` seconds (a sliding window at the price of two integers).

The client address is REMOTE_ADDR, never X-Forwarded-For read here, which any client can
write. Behind a reverse proxy, REMOTE_ADDR is the client's address as the proxy saw it when the
proxy is in MLQ_TRUSTED_PROXIES (mlqueue/proxies.py reads X-Forwarded-For from the right, from
trusted proxies only); otherwise it is the proxy's own, and every client behind it shares one
address (and one allowance). Never daphne's `--proxy-headers`: it believes the header from a
client that reaches the web port directly, who could then change it with every guess.
"""

import functools
import hashlib
import ipaddress
import logging
import math
import time

from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import authenticate
from django.contrib.auth.forms import AuthenticationForm
from django.core.cache import cache
from django.core.exceptions import ValidationError
from rest_framework import exceptions

logger = logging.getLogger(__name__)

LOCKED_USER = "too many failed logins for user name {username!r}: try again in {wait}."
LOCKED_ADDRESS = "too many failed logins from your address ({address}): try again in {wait}."
LOCKOUT_LOG = "login locked for %d s: %s had %d failed logins (user name %r, address %s)"


class LoginLocked(exceptions.Throttled):
    """A 429 with Retry-After in the API (mlqueue.api_errors renders it); the login forms show
    its message."""

    default_code = "login_locked"

    def __init__(self, *, message: str, retry_after: int):
        exceptions.APIException.__init__(self, message, self.default_code)
        self.wait = retry_after


def client_address(request) -> str:
    """REMOTE_ADDR (see the module docstring for proxies); an IPv6 client as its /64, which one
    host usually holds whole, so it cannot rotate addresses to escape the limit."""
    raw = request.META.get("REMOTE_ADDR", "") if request is not None else ""
    try:
        address = ipaddress.ip_address(raw)
    except ValueError:
        return raw
    if address.version == 6 and address.ipv4_mapped:
        return str(address.ipv4_mapped)
    if address.version == 6:
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


def _subjects(username: str, address: str) -> list[tuple[str, str, int]]:
    """(kind, who, allowed failures) for what an attempt is counted against."""
    subjects = []
    if username:
        subjects.append(("user", username.casefold(), settings.MLQ_LOGIN_MAX_FAILURES))
    if address:
        subjects.append(("address", address, settings.MLQ_LOGIN_MAX_FAILURES_PER_ADDRESS))
    return subjects


def _key(what: str, kind: str, who: str, bucket: int | None = None) -> str:
    # Hashed: a user name is whatever the client typed, and cache keys have rules.
    digest = hashlib.sha256(who.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"mlq:login:{what}:{kind}:{digest}" + ("" if bucket is None else f":{bucket}")


def _human_wait(seconds: int) -> str:
    return f"{seconds} s" if seconds < 120 else f"{math.ceil(seconds / 60)} min"


def check_login_allowed(*, username: str, address: str) -> None:
    """Raise LoginLocked if the user name or the address is locked (the longer wait wins)."""
    now = time.time()
    locks = {_key("lock", kind, who): kind for kind, who, _ in _subjects(username, address)}
    waits = {locks[key]: math.ceil(until - now) for key, until in cache.get_many(list(locks)).items() if until > now}
    if not waits:
        return
    kind = max(waits, key=waits.get)
    template = LOCKED_USER if kind == "user" else LOCKED_ADDRESS
    wait = waits[kind]
    raise LoginLocked(
        message=template.format(username=username, address=address, wait=_human_wait(wait)), retry_after=wait
    )


def _count_failure(kind: str, who: str, now: float, window: int) -> float:
    """Count one failure; return the failures within the last `window` seconds (estimated)."""
    bucket = int(now // window)
    current = _key("fail", kind, who, bucket)
    cache.add(current, 0, timeout=2 * window)
    count = cache.incr(current)
    previous = cache.get(_key("fail", kind, who, bucket - 1), 0)
    return count + previous * (1 - (now % window) / window)


def note_login_failure(*, username: str, address: str) -> None:
    """Count a failed login; lock (and log, never the password) what reached its allowance."""
    now, window = time.time(), settings.MLQ_LOGIN_WINDOW_S
    for kind, who, allowed in _subjects(username, address):
        failures = _count_failure(kind, who, now, window)
        if failures < allowed:
            continue
        # add(): of concurrent failures crossing the line, one locks and logs.
        if cache.add(_key("lock", kind, who), now + window, timeout=window):
            logger.warning(LOCKOUT_LOG, window, kind, math.floor(failures), username, address or "unknown")
        _forget(kind, who, now, window)  # the lock's end starts a fresh count


def _forget(kind: str, who: str, now: float, window: int) -> None:
    bucket = int(now // window)
    cache.delete_many([_key("fail", kind, who, bucket), _key("fail", kind, who, bucket - 1)])


def note_login_success(*, username: str) -> None:
    """A right password clears its user name's count (not its address's: see the docstring)."""
    if username:
        _forget("user", username.casefold(), time.time(), settings.MLQ_LOGIN_WINDOW_S)


def authenticate_within_limits(request, *, username: str, password: str):
    """authenticate() for the password-to-token exchange: the user, or None for wrong
    credentials; raises LoginLocked (429) without checking the password while locked."""
    address = client_address(request)
    check_login_allowed(username=username, address=address)
    user = authenticate(request, username=username, password=password)
    if user is None:
        note_login_failure(username=username, address=address)
    else:
        note_login_success(username=username)
    return user


class LoginLimitsMixin:
    """For Django's login forms: the same rules as authenticate_within_limits. `lockout` is
    set when the attempt was refused, for with_lockout_status to answer 429."""

    lockout: LoginLocked | None = None

    def clean(self):
        username, address = self.cleaned_data.get("username") or "", client_address(self.request)
        try:
            check_login_allowed(username=username, address=address)
        except LoginLocked as exc:
            self.lockout = exc
            raise ValidationError(str(exc.detail), code="locked") from None
        try:
            cleaned = super().clean()
        except ValidationError as exc:
            if exc.code == "invalid_login":
                note_login_failure(username=username, address=address)
            raise
        note_login_success(username=username)
        return cleaned


class LimitedAuthenticationForm(LoginLimitsMixin, AuthenticationForm):
    pass


class LimitedAdminAuthenticationForm(LoginLimitsMixin, AdminAuthenticationForm):
    pass


def with_lockout_status(view):
    """Wrap a login view (LoginView, admin.site.login): a refused attempt answers 429 with
    Retry-After instead of the form's usual 200."""

    @functools.wraps(view)
    def wrapped(request, *args, **kwargs):
        response = view(request, *args, **kwargs)
        form = (getattr(response, "context_data", None) or {}).get("form")
        lockout = getattr(form, "lockout", None)
        if lockout is not None:
            response.status_code = 429
            response["Retry-After"] = str(lockout.wait)
        return response

    return wrapped
