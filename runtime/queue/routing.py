"""Which server a deployment's calls go to, and following it when it moves.

Every key of a namespace is in one Cluster slot (keys.py), so a deployment
talks to one primary at a time, whatever the topology:

* one server: one address.
* a Sentinel service: redis-py's SentinelConnectionPool asks the sentinels
  for the primary on every new connection, and drops a connection whose
  server answers READONLY (a demoted primary). A primary that lost its
  replicas answers NOREPLICAS (min-replicas-to-write) for as long as the
  sentinels take to demote it (up to ~10 s after a failover), MASTERDOWN a
  replica cut off from it: a connection that hears either is dropped too
  (`stale`), so the next call asks the sentinels again.
* a Cluster: the node that owns the namespace's slot. It is found the way any
  cluster client finds it: ask a node (the first seed), and a `MOVED slot
  host:port` names the owner. A call keeps its pipeline whole and goes to that
  one node; a reply that says MOVED (the slot changed owner: a failover, a
  resharding) was not run there, so the commands it answers are sent again,
  unchanged, to the node it names. A connection lost to a cluster node sends
  the next call to the next seed, which redirects it to the slot's new owner.

`ASK` (the slot is being migrated and a key is not on the source any more) is
never followed: our scripts touch many keys of the slot, and the importing
node, asked with ASKING, would run them on the keys moved so far. The
declared key of every script call (KEYS[1], the bare namespace root) never
exists, so while the slot migrates every call is answered ASK by the source,
or MOVED back by the target: no script runs until the slot has one owner
again; the callers back off (RedisTransient `tryagain`) meanwhile.

Pure: no I/O, so the synchronous and the asyncio client share it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import redis

from runtime.queue import urls

STALE_CODES = ("NOREPLICAS", "READONLY", "MASTERDOWN")  # maybe not the primary any more
MAX_REDIRECTS = 5  # MOVED answers followed in one round trip before giving up (transient)


@dataclass
class Route:
    """The node a deployment's calls go to now (`url`, a plain redis URL), for a
    cluster target; for the others `url` is the configured URL and never changes."""

    target: urls.Target
    url: str = ""
    seed: int = 0
    moves: int = field(default=0)  # MOVED answers followed so far (for tests and logs)

    def __post_init__(self) -> None:
        if not self.url:
            self.url = self._seed_url() if self.routed else self.target.url

    @classmethod
    def of(cls, url: str) -> Route:
        return cls(urls.parse(url))

    @property
    def routed(self) -> bool:
        """Whether calls follow MOVED (a cluster)."""
        return self.target.kind == "cluster"

    def _seed_url(self) -> str:
        return self.target.node_url(self.target.seeds[self.seed % len(self.target.seeds)])

    def follow(self, reply: Any) -> bool:
        """If `reply` is MOVED and calls are routed: the route now names the node it
        names (True). False for anything else."""
        if not (self.routed and isinstance(reply, redis.exceptions.MovedError)):
            return False
        self.url = self.target.node_url((reply.host, reply.port))
        self.moves += 1
        return True

    def lost(self) -> bool:
        """The current node could not be reached: routed calls try the next seed
        (True when the route changed)."""
        if not self.routed:
            return False
        self.seed += 1
        self.url = self._seed_url()
        return True


def stale(target: urls.Target, replies: list[Any]) -> bool:
    """Whether a Sentinel-managed connection should be dropped after these replies:
    one says its server may not be the primary any more (STALE_CODES)."""
    return target.kind == "sentinel" and any(stale_reply(reply) for reply in replies)


def stale_reply(reply: Any) -> bool:
    """Whether a reply is an error saying its server may not be the primary."""
    if not isinstance(reply, redis.exceptions.ResponseError):
        return False
    code = getattr(reply, "status_code", None) or str(reply).split(" ", 1)[0]
    return code in STALE_CODES


def follows(route: Route, replies: list[Any]) -> bool:
    """Whether some replies say MOVED and the route followed the first of them."""
    redo = redirected(replies)
    return bool(redo) and route.follow(replies[redo[0]])


def redirected(replies: list[Any]) -> list[int]:
    """Indexes of the replies that say MOVED: their commands were not run."""
    return [i for i, reply in enumerate(replies) if isinstance(reply, redis.exceptions.MovedError)]


def probed(target: urls.Target, request: list[Any]) -> list[Any]:
    """The request as sent: for a Sentinel service, reads (FCALL_RO: `no-writes`
    functions, which an isolated old primary refusing writes with NOREPLICAS,
    or a replica, still answer from their own data) go with a write that changes
    nothing after them, PERSIST of the namespace's root key (which never
    exists), so that such a server is noticed (`checked`) as writes notice it."""
    if target.kind != "sentinel":
        return request
    reads = [c for c in request if c[0] == "FCALL_RO"]
    if not reads:
        return request
    return [*request, ("PERSIST", reads[0][3])]


def checked(sent: list[Any], request: list[Any], replies: list[Any]) -> list[Any]:
    """The replies to `request` (the probe that `probed` added taken off): every
    one the probe's error when the server refused that write (STALE_CODES)."""
    if len(sent) == len(request):
        return replies
    probe, replies = replies[-1], replies[:-1]
    if stale_reply(probe):
        return [probe for _ in replies]
    return replies
