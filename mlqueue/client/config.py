"""The config file `mlq login` writes: ~/.config/mlqueue/config.toml (or under XDG_CONFIG_HOME),
the server, a token and the user name, readable by the user alone."""

import ipaddress
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
NO_TOKEN = "no token: set MLQ_TOKEN, pass token=, or run `mlq login`"
TOKEN_FOR_ANOTHER = (
    "no token for {server}: the one `mlq login` saved is for {saved}, and goes to no other server: "
    "run `mlq login --server {server}`, or set MLQ_TOKEN"
)


def same_server(one: str, other: str) -> bool:
    """Whether two server addresses name the same site: scheme and host in any case, a default
    port written or not, a trailing slash or not; `localhost`, 127.0.0.1 and ::1 alike (this
    machine by any of its loopback names: a token saved for one is not sent anywhere else)."""
    if not one or not other:
        return False
    return _normal(one) == _normal(other)


def _normal(server: str) -> tuple:
    try:
        parts = urlsplit(server.strip())
    except ValueError:  # no URL ("http://[bad"): compared as written; the client says what is wrong
        return (server.strip(),)
    try:
        port = parts.port or DEFAULT_PORTS.get(parts.scheme.lower())
    except ValueError:  # a port that is no number: compared as written
        port = parts.netloc
    return parts.scheme.lower(), _host(parts.hostname or ""), port, parts.path.rstrip("/")


def _host(name: str) -> str:
    name = name.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return "loopback"
    try:
        return "loopback" if ipaddress.ip_address(name).is_loopback else name
    except ValueError:  # a name, not an address
        return name


def credentials(server: str, token: str | None, config: dict) -> tuple[str, str, str]:
    """The token for `server` (given, MLQ_TOKEN, else the saved one if saved for this server),
    who it belongs to (MLQ_USER, else as `mlq login` saved it), and what to say without one."""
    saved_for_this = same_server(server, config.get("server", ""))  # a token never goes to another server
    from_config = not token and not os.environ.get("MLQ_TOKEN") and saved_for_this
    token = token or os.environ.get("MLQ_TOKEN") or (config.get("token", "") if from_config else "")
    user = os.environ.get("MLQ_USER") or (config.get("user", "") if from_config else "")
    missing = NO_TOKEN
    if server and config.get("token") and not saved_for_this:
        missing = TOKEN_FOR_ANOTHER.format(server=server, saved=config.get("server") or "no server")
    return token, user, missing


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
