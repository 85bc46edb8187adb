"""Secret env values (`secret_env` in a job spec): encrypted at rest, shown as *** everywhere,
decrypted only into the environment of the task an agent is told to run.

Keys come from `MLQ_SECRET_ENV_KEYS`: comma-separated Fernet keys; the first encrypts, every one
decrypts, so a new key goes first and an old one stays listed while jobs encrypted with it may
still run. Unset, a key is derived from SECRET_KEY so the demo works; `check --deploy` warns.
"""

import base64
import hashlib
import hmac
import json
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

MASK = "***"
BAD_KEY = (
    "MLQ_SECRET_ENV_KEYS: key {number} is not a Fernet key (32 url-safe base64-encoded bytes); make one with "
    "python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'."
)
UNREADABLE = (
    "the secret_env of job {job_id} cannot be decrypted with any key in MLQ_SECRET_ENV_KEYS: "
    "put back the key it was encrypted with (keep old keys listed after the new one)."
)
NO_KEYS_HINT = (
    "secret_env values are encrypted with a key derived from SECRET_KEY: set MLQ_SECRET_ENV_KEYS to your own "
    "Fernet keys (the first encrypts, all decrypt) so that a SECRET_KEY change does not lose them."
)


class SecretEnvUnreadable(Exception):
    """A stored ciphertext that no configured key opens (a key was dropped too early)."""


def _hkdf(material: bytes, purpose: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=b"mlqueue", info=purpose).derive(material)


def derived_key(secret_key: str | None = None) -> str:
    """The key used while MLQ_SECRET_ENV_KEYS is unset. To move to your own keys without losing
    the secrets of jobs already submitted, list it after your new key until those jobs end."""
    material = (secret_key or settings.SECRET_KEY).encode()
    return base64.urlsafe_b64encode(_hkdf(material, b"secret_env fernet key")).decode()


@lru_cache(maxsize=4)
def _keys(configured: tuple[str, ...], secret_key: str) -> tuple[bytes, ...]:
    """The Fernet keys, current first. Cached on the settings' values, so a test that
    overrides the settings gets its own keys."""
    if not configured:
        return (derived_key(secret_key).encode(),)
    for number, key in enumerate(configured, 1):
        try:
            Fernet(key.encode())
        except ValueError:
            raise ImproperlyConfigured(BAD_KEY.format(number=number)) from None
    return tuple(key.encode() for key in configured)


def _configured() -> tuple[str, ...]:
    keys = settings.MLQ_SECRET_ENV_KEYS
    return tuple(k.strip() for k in (keys.split(",") if isinstance(keys, str) else keys) if k.strip())


def _current_keys() -> tuple[bytes, ...]:
    return _keys(_configured(), settings.SECRET_KEY)


def _fernet() -> MultiFernet:
    return MultiFernet([Fernet(key) for key in _current_keys()])


def encrypt_env(values: dict[str, str]) -> str:
    """The values as one Fernet token ("" for none), with the current key."""
    if not values:
        return ""
    return _fernet().encrypt(json.dumps(values, sort_keys=True).encode()).decode()


def decrypt_env(token: str, *, job_id: int | None = None) -> dict[str, str]:
    if not token:
        return {}
    try:
        return json.loads(_fernet().decrypt(token.encode()))
    except InvalidToken:
        raise SecretEnvUnreadable(UNREADABLE.format(job_id=job_id)) from None


def encrypt_text(text: str) -> str:
    """One value as a Fernet token with the current key (notifications' signing secrets)."""
    return _fernet().encrypt(text.encode()).decode()


def decrypt_text(token: str) -> str | None:
    """The value, or None when no configured key reads it any more."""
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken:
        return None


def masked(values: dict) -> dict[str, str]:
    """The names with every value shown as ***."""
    return {name: MASK for name in values} if isinstance(values, dict) else MASK


def masked_spec(spec: dict) -> dict:
    """A spec safe to show: its secret_env (if any) masked, the rest as it is."""
    if not isinstance(spec, dict) or "secret_env" not in spec:
        return spec
    return {**spec, "secret_env": masked(spec["secret_env"])}


def env_macs(values: dict[str, str]) -> list[str]:
    """HMACs of the secret names and values, one per configured key, current first ([""] for
    none). The spec digest takes one in place of the values: a resubmit with other secrets is
    another spec, yet the digest tells nothing about them (a plain hash of a short token can be
    brute-forced; this needs the key that also decrypts them)."""
    if not values:
        return [""]
    message = json.dumps(values, sort_keys=True, separators=(",", ":")).encode()
    return [
        hmac.new(_hkdf(base64.urlsafe_b64decode(key), b"secret_env digest"), message, hashlib.sha256).hexdigest()
        for key in _current_keys()
    ]


@checks.register(checks.Tags.security)
def check_secret_env_keys(app_configs=None, **kwargs):
    try:
        _current_keys()
    except ImproperlyConfigured as exc:
        return [checks.Error(str(exc), id="mlqueue.E001")]
    return []


@checks.register(checks.Tags.security, deploy=True)
def check_secret_env_keys_set(app_configs=None, **kwargs):
    if _configured():
        return []
    return [checks.Warning(NO_KEYS_HINT, hint="MLQ_SECRET_ENV_KEYS=<Fernet key>[,<older key>...]", id="mlqueue.W001")]
