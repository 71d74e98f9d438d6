"""Redis URLs read one way everywhere, and shown without their credentials.

    >>> url = parse_redis_url("redis://app:p@ss/w#rd?@10.0.0.7:6380/2")
    >>> url.username, url.password, url.address, url.shown
    ('app', 'p@ss/w#rd?', '10.0.0.7:6380', 'redis://10.0.0.7:6380/2')

**The rule.** ``redis://[USER[:PASSWORD]@]HOST[:PORT][/DB][?OPTIONS]`` (``rediss://`` for TLS,
``unix://[USER[:PASSWORD]@]/PATH[?OPTIONS]``): the user and password are everything between
``://`` and the *last* ``@`` (for ``unix://``, the last ``@`` before the path's ``/``), split at
the first ``:``. So a password may hold ``/ # ? @ : %`` and spaces as they are; a ``%`` followed by
two hex digits is always a percent-escape (``%25`` is ``%``, ``%40`` is ``@``), and a ``%``
followed by anything else is refused. Errors are one line (:class:`BadRedisURL`) that never
holds the user or the password, and the client gets the credentials as arguments, never
inside the URL it parses (so nothing it raises can quote them).
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass, field

SCHEMES = ("redis", "rediss", "unix")
_HOST = re.compile(
    r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~-]*)(?::(?P<port>[^/?]*))?(?P<path>/[^?]*)?(?:\?(?P<query>.*))?"
)
_SHOWN = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]*)(:[0-9]*(?=[/?]|$))?(/[A-Za-z0-9]{0,16}(?=[?]|$))?")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_SECRET_OPTIONS = ("password", "username")


class BadRedisURL(ValueError):
    """A URL that is not a Redis URL, in one line without its user or password."""


@dataclass(frozen=True)
class RedisURL:
    """A parsed Redis URL; ``repr`` and :attr:`shown` never hold the credentials."""

    scheme: str
    host: str
    port: int
    db: int
    path: str
    """The socket of a ``unix://`` URL; empty otherwise."""
    query: str = ""
    """The options (``?ssl_cert_reqs=none``), without ``username`` or ``password``."""
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        """``host:port`` (or ``unix:PATH``)."""
        return f"unix:{self.path}" if self.scheme == "unix" else f"{self.host}:{self.port}"

    @property
    def where(self) -> str:
        """``host:port/db`` (or ``unix:PATH``)."""
        return self.address if self.scheme == "unix" else f"{self.address}/{self.db}"

    @property
    def shown(self) -> str:
        """The URL without user or password: safe for logs, errors and status."""
        options = f"?{self.query}" if self.query else ""
        if self.scheme == "unix":
            return f"unix://{self.path}{options}"
        return f"{self.scheme}://{self.host}:{self.port}/{self.db}{options}"

    @property
    def client_url(self) -> str:
        """What the Redis client parses: :attr:`shown` (credentials go as arguments)."""
        return self.shown


def parse_redis_url(url: str) -> RedisURL:
    """``url`` parsed by the rule above; :class:`BadRedisURL` (one line, no credentials)."""
    text = url.strip()
    scheme, sep, rest = text.partition("://")
    if not sep or scheme.lower() not in SCHEMES:
        raise BadRedisURL(f"{_shown_raw(text)!r} is not a Redis URL: it must start with redis://, rediss:// or unix://")
    scheme = scheme.lower()
    userinfo, hostpart = _split_userinfo(scheme, rest)
    username, password = _credentials(userinfo, scheme)
    if scheme == "unix":
        path, _, query = hostpart.partition("?")
        if not path.startswith("/") or path == "/":
            raise BadRedisURL(
                f"{_shown(scheme, hostpart)!r} is not a Redis URL: it names no socket path (unix:///PATH)"
            )
        query, username, password = _options(query, username, password, scheme, hostpart)
        return RedisURL(scheme, "", 0, _db_option(query), urllib.parse.unquote(path), query, username, password)
    match = _HOST.fullmatch(hostpart)
    if match is None:
        raise BadRedisURL(
            f"{_shown(scheme, hostpart)!r} is not a Redis URL: expected {scheme}://[USER[:PASSWORD]@]HOST[:PORT][/DB] "
            "(in a password, write % as %25)"
        )
    port_text = match["port"]
    if port_text is not None and not (port_text.isdigit() and 0 < int(port_text) <= 65535):
        hint = "" if port_text.isdigit() else " (a password goes before an @: redis://:PASSWORD@HOST)"
        raise BadRedisURL(
            f"{_shown(scheme, hostpart)!r} is not a Redis URL: its port is not a number from 1 to 65535{hint}"
        )
    path = (match["path"] or "").strip("/")
    if path and not path.isdigit():  # the client would quietly use database 0
        raise BadRedisURL(
            f"{_shown(scheme, hostpart)!r} is not a Redis URL: its path {_plain('/' + path)!r} is not a database "
            f"number ({scheme}://HOST:PORT/DB)"
        )
    query, username, password = _options(match["query"] or "", username, password, scheme, hostpart)
    host = match["host"] or "localhost"
    db = _db_option(query, int(path or 0))  # as the client: the option wins over the path
    return RedisURL(scheme, host, int(port_text) if port_text else 6379, db, "", query, username, password)


def redacted_url(url: str) -> str:
    """``url`` as it may be printed: without user and password (never raises).

    >>> redacted_url("redis://:hunter2@redis:6379/0"), redacted_url("redis://:a b@c:d")
    ('redis://redis:6379/0', 'redis://c')
    """
    try:
        return parse_redis_url(url).shown
    except BadRedisURL:
        scheme, sep, rest = url.strip().partition("://")
        return _shown_raw(url.strip()) if not sep else _shown(scheme, _split_userinfo(scheme.lower(), rest)[1])


def _split_userinfo(scheme: str, rest: str) -> tuple[str | None, str]:
    """(user and password as written, or None; the rest), by the last ``@`` (``unix``: the
    last ``@`` followed by ``/``; text starting with ``/`` is a path, not a user)."""
    at = rest.rfind("@/") if scheme == "unix" else rest.rfind("@")
    if at < 0 or (scheme == "unix" and rest.startswith("/")):
        return None, rest
    return rest[:at], rest[at + 1 :]


def _credentials(userinfo: str | None, scheme: str) -> tuple[str | None, str | None]:
    if userinfo is None:
        return None, None
    user, colon, password = userinfo.partition(":")
    if _BAD_ESCAPE.search(userinfo):
        raise BadRedisURL(
            f"the user or password of the {scheme}:// URL holds a '%' that starts no percent-escape: "
            "write a '%' as %25 (see docs/redis-urls.md)"
        )
    try:
        decoded_user = urllib.parse.unquote(user, errors="strict")
        decoded_password = urllib.parse.unquote(password, errors="strict") if colon else ""
    except UnicodeDecodeError:
        raise BadRedisURL(f"the user or password of the {scheme}:// URL is not UTF-8 once percent-decoded") from None
    return decoded_user or None, decoded_password or None


def _options(
    query: str, username: str | None, password: str | None, scheme: str, hostpart: str
) -> tuple[str, str | None, str | None]:
    """The options without ``username``/``password`` (those become the credentials)."""
    try:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True, errors="strict")
    except UnicodeDecodeError:
        raise BadRedisURL(f"{_shown(scheme, hostpart)!r} is not a Redis URL: its options are not UTF-8") from None
    kept = [(name, value) for name, value in pairs if name not in _SECRET_OPTIONS]
    found = {name: value for name, value in pairs if name in _SECRET_OPTIONS}
    return (
        urllib.parse.urlencode(kept),
        found.get("username") or username,
        found.get("password") or password,
    )


def _db_option(query: str, default: int = 0) -> int:
    value = dict(urllib.parse.parse_qsl(query)).get("db", str(default))
    if not value.isdigit():
        raise BadRedisURL(f"the db option of the Redis URL is not a database number: {value!r}")
    return int(value)


def _shown(scheme: str, hostpart: str) -> str:
    """``scheme://`` and what could be read of host, port and database after the credentials:
    only a host name, a port of digits and a plain path (free text could be a password
    written without its ``@``), never the options (they may hold one)."""
    match = _SHOWN.match(hostpart)
    return (
        f"{scheme}://{match[0] if match else ''}"
        if scheme != "unix"
        else f"unix://{_plain(hostpart.partition('?')[0])}"
    )


def _plain(text: str) -> str:
    """``text`` if it is a plain name or path (nothing a password is made of), else ``...``."""
    return text if re.fullmatch(r"[A-Za-z0-9/._-]{0,64}", text) else "..."


def _shown_raw(text: str) -> str:
    """A URL of an unknown scheme, as written, less anything up to its last ``@``."""
    scheme, sep, rest = text.partition("://")
    if not sep:
        match = _SHOWN.match(text.rsplit("@", 1)[-1])
        return match[0] if match else ""
    return _shown(scheme, rest.rsplit("@", 1)[-1])
