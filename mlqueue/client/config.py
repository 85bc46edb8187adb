"""The config file `mlq login` writes: ~/.config/mlqueue/config.toml (or under XDG_CONFIG_HOME),
the server, a token and the user name, readable by the user alone."""

import os
import tomllib
from pathlib import Path
from urllib.parse import urlsplit


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "mlqueue" / "config.toml"


NOT_TOML = "{path}: not a config file ({error}): fix it, or delete it and run `mlq login`"
NOT_UTF8 = "{path}: not a config file (not UTF-8 text): fix it, or delete it and run `mlq login`"
UNREADABLE = "{path}: cannot read it ({error})"
NOT_TEXT = "{path}: {key} must be text in quotes, not {kind}: fix it, or delete it and run `mlq login`"


DEFAULT_PORTS = {"http": 80, "https": 443}


def same_server(one: str, other: str) -> bool:
    """Whether two server addresses name the same site: scheme and host in any case, a default
    port written or not, a trailing slash or not."""
    if not one or not other:
        return False
    return _normal(one) == _normal(other)


def _normal(server: str) -> tuple:
    parts = urlsplit(server.strip())
    try:
        port = parts.port or DEFAULT_PORTS.get(parts.scheme.lower())
    except ValueError:  # a port that is no number: compared as written
        port = parts.netloc
    return parts.scheme.lower(), (parts.hostname or "").lower(), port, parts.path.rstrip("/")


def read_config(path: Path | None = None) -> dict:
    """The file's settings (none when there is no file); a file that cannot be read, or whose
    server, token or user is not text, is an MlqError saying so, not a traceback."""
    from mlqueue.client.errors import MlqError

    path = path or config_path()
    try:
        with open(path, "rb") as file:
            found = tomllib.load(file)
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as error:
        raise MlqError(0, NOT_TOML.format(path=path, error=error)) from None
    except UnicodeDecodeError:  # TOML is UTF-8; tomllib lets the decoding's own error through
        raise MlqError(0, NOT_UTF8.format(path=path)) from None
    except OSError as error:  # a directory in its place, no permission
        raise MlqError(0, UNREADABLE.format(path=path, error=error.strerror or error)) from None
    for key in ("server", "token", "user"):
        if key in found and not isinstance(found[key], str):
            raise MlqError(0, NOT_TEXT.format(path=path, key=key, kind=type(found[key]).__name__))
    return found


def _toml_string(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def write_config(server: str, token: str, user: str = "", path: Path | None = None) -> Path:
    """Write the server, token and user name, readable by the user alone (0600 from its creation on)."""
    path = path or config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    text = f"server = {_toml_string(server)}\ntoken = {_toml_string(token)}\nuser = {_toml_string(user)}\n"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)
    return path
