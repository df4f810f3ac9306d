"""The forms of a Redis URL, parsed once: one server, a service behind Sentinel,
or a Redis Cluster.

    redis://[user:pass@]host[:port][/db]        one server (also rediss://, unix://)
    redis+sentinel://[user:pass@]host:port[,host:port...]/service[/db]
        the primary of `service`, as the sentinels at those addresses name it
        (port 26379 when left out). The credentials are the Redis servers';
        sentinels that require their own take ?sentinel_user=&sentinel_password=.
    redis+cluster://[user:pass@]host:port[,host:port...]
        a Redis Cluster reached through any of these nodes (port 6379 when left
        out); db 0 only.

A plain URL goes to redis-py as written; `Target` holds what the other two say.
Nothing here connects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from runtime.errors import ConfigError
from runtime.queue.faults import redact

SENTINEL_SCHEME = "redis+sentinel"
CLUSTER_SCHEME = "redis+cluster"
SENTINEL_PORT = 26379
CLUSTER_PORT = 6379
SENTINEL_OPTIONS = ("sentinel_user", "sentinel_password")

Kind = Literal["server", "sentinel", "cluster"]
Address = tuple[str, int]


@dataclass(frozen=True)
class Target:
    """What a URL names: `kind`, the addresses to ask first (sentinels or cluster
    nodes; none for a plain server), the Sentinel service, db and credentials."""

    url: str
    kind: Kind
    seeds: tuple[Address, ...] = ()
    service: str = ""
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = None

    def node_url(self, address: Address) -> str:
        """A plain URL for one node of a cluster, with the credentials."""
        host, port = address
        host = f"[{host}]" if ":" in host else host
        user = quote(self.username or "", safe="")
        auth = f"{user}:{quote(self.password, safe='')}@" if self.password else ""
        auth = auth or (f"{user}@" if user else "")
        return f"redis://{auth}{host}:{port}/0"


# every form a Redis URL may take, as the message refusing any other lists them
PLAIN_SCHEMES = ("redis", "rediss", "unix")
FORMS = (
    "redis://[user:pass@]host[:port][/db]",
    "rediss://... (TLS)",
    "unix:///path/to/redis.sock[?db=N]",
    "redis+sentinel://host:port[,host:port...]/service[/db]",
    "redis+cluster://host:port[,host:port...]",
)


def kind_of(url: str) -> Kind:
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme == SENTINEL_SCHEME:
        return "sentinel"
    if scheme == CLUSTER_SCHEME:
        return "cluster"
    return "server"


def parse(url: str) -> Target:
    """The Target a URL names; ConfigError (the URL redacted) if it is malformed
    or of a scheme none of FORMS has."""
    kind = kind_of(url)
    if kind == "server":
        scheme = url.split("://", 1)[0].lower() if "://" in url else ""
        if scheme not in PLAIN_SCHEMES:
            said = f"scheme {scheme + '://'!r}" if scheme else "no scheme"
            raise ConfigError(
                f"bad Redis URL {redact(url)}: {said}; the forms are " + ", ".join(FORMS)
            )
        return Target(url, kind)
    try:
        return _parse(url, kind)
    except (ValueError, IndexError) as err:
        raise ConfigError(f"bad Redis URL {redact(url)}: {redact(str(err))}") from err


def _parse(url: str, kind: Kind) -> Target:
    rest = url.split("://", 1)[1]
    rest, _, query = rest.partition("?")
    netloc, _, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    default_port = SENTINEL_PORT if kind == "sentinel" else CLUSTER_PORT
    seeds = tuple(_address(h, default_port) for h in hosts.split(",") if h)
    if not seeds:
        raise ValueError("name at least one host:port")
    options = dict(parse_qsl(query, keep_blank_values=True))
    unknown = set(options) - set(SENTINEL_OPTIONS if kind == "sentinel" else ())
    if unknown:
        raise ValueError(f"unknown options {sorted(unknown)}")
    parts = [p for p in path.split("/") if p]
    if kind == "cluster":
        if parts and parts != ["0"]:
            raise ValueError("a cluster has db 0 only")
        return Target(url, kind, seeds, username=username, password=password)
    if not parts or len(parts) > 2:
        raise ValueError("the form is redis+sentinel://host:port[,host:port...]/service[/db]")
    db = int(parts[1]) if len(parts) == 2 else 0
    if db < 0:
        raise ValueError("db must be >= 0")
    return Target(
        url,
        kind,
        seeds,
        service=unquote(parts[0]),
        db=db,
        username=username,
        password=password,
        sentinel_username=options.get("sentinel_user") or None,
        sentinel_password=options.get("sentinel_password") or None,
    )


def _address(text: str, default_port: int) -> Address:
    """host, host:port, [v6]:port."""
    parts = urlsplit("//" + text)
    if not parts.hostname:
        raise ValueError(f"bad host {text!r}")
    return parts.hostname, parts.port or default_port
