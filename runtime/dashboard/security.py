"""The dashboard's guard, in front of every request (an ASGI middleware):

- Host: while the server is bound to a loopback address, a request whose `Host` is
  not a loopback name (or one allowed by --allow-host) is refused: a page on another
  site that re-points its DNS name at 127.0.0.1 would otherwise read and act as a
  local user (DNS rebinding).
- Basic auth, when configured: a request without the right credentials gets 401.
- Same origin: every POST must come from a page of this dashboard: `Sec-Fetch-Site:
  same-origin`, or without that header an `Origin` equal to this request's scheme and
  `Host`. Anything else (no header, `null`, another site) is refused with 403. No
  action is a GET, so this covers every action (CSRF).
- Every response carries headers that keep it out of frames and limit what a page
  may load to this server (Content-Security-Policy).

Refusals are one line of plain text.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
HEADERS = (
    (
        b"content-security-policy",
        b"default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        b"frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
)


@dataclass(frozen=True)
class Credentials:
    user: str
    password: str

    @classmethod
    def parse(cls, text: str) -> Credentials:
        """`user:password` (the password may hold colons); ValueError if malformed."""
        user, sep, password = text.partition(":")
        if not sep or not user or not password:
            raise ValueError("basic auth must be given as user:password")
        return cls(user, password)

    def accepts(self, header: str | None) -> bool:
        """Whether an `Authorization` header carries these credentials."""
        scheme, _, encoded = (header or "").partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            given = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        expected = f"{self.user}:{self.password}".encode()
        return hmac.compare_digest(given, expected)


def host_name(host_header: str) -> str:
    """The name part of a Host header: "127.0.0.1:8008" -> "127.0.0.1", "[::1]:80" -> "::1"."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def is_loopback(name: str) -> bool:
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def same_origin(
    method: str, scheme: str, host: str | None, origin: str | None, fetch_site: str | None
) -> bool:
    """Whether a request may change something: safe methods always; any other only
    from this dashboard's own pages (see the module's docstring)."""
    if method in SAFE_METHODS:
        return True
    if fetch_site is not None:
        return fetch_site.strip().lower() == "same-origin"
    if not origin or not host or origin.strip().lower() == "null":
        return False
    parts = urlsplit(origin.strip().lower())
    default = {"http": 80, "https": 443}.get(parts.scheme)
    try:
        origin_port = parts.port or default
    except ValueError:
        return False
    request = urlsplit(f"{scheme}://{host.strip().lower()}")
    try:
        request_port = request.port or {"http": 80, "https": 443}.get(scheme)
    except ValueError:
        return False
    return (parts.scheme, parts.hostname, origin_port) == (scheme, request.hostname, request_port)


class Guard:
    """The middleware: Host check (loopback binds), basic auth, same-origin POSTs,
    security headers on every response."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        credentials: Credentials | None,
        loopback_only: bool,
        allowed_hosts: Iterable[str] = (),
    ) -> None:
        self.app = app
        self.credentials = credentials
        self.loopback_only = loopback_only
        self.allowed_hosts = frozenset(h.lower() for h in allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope["headers"])
        refusal = self.refusal(scope, headers)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        if refusal is None:
            await self.app(scope, receive, send_with_headers)
            return
        status, text, extra = refusal
        await send_with_headers(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), *extra],
            }
        )
        await send({"type": "http.response.body", "body": text.encode() + b"\n"})

    def refusal(
        self, scope: Scope, headers: dict[str, str]
    ) -> tuple[int, str, list[tuple[bytes, bytes]]] | None:
        """(status, one line, extra headers) for a request to refuse; None to serve it."""
        host = headers.get("host")
        name = host_name(host or "")
        if self.loopback_only and not (is_loopback(name) or name in self.allowed_hosts):
            log.warning("refused a request for Host %r (the dashboard listens on loopback)", host)
            return 403, "refused: this dashboard answers to localhost names only", []
        if self.credentials and not self.credentials.accepts(headers.get("authorization")):
            return 401, "authentication required", [(b"www-authenticate", b'Basic realm="runtime"')]
        method = scope["method"]
        origin, fetch_site = headers.get("origin"), headers.get("sec-fetch-site")
        if not same_origin(method, scope.get("scheme", "http"), host, origin, fetch_site):
            log.warning(
                "refused a %s from origin %r (sec-fetch-site %r)", method, origin, fetch_site
            )
            return 403, "refused: not a same-origin request", []
        return None


def _headers(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw}
