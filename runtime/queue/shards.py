"""A sharded site: which namespace each queue lives in, by one rule.

A namespace is one Redis slot (keys.py), so one namespace is bounded by one
Redis core. A site spreads its queues over several namespaces — on the nodes
of a Redis Cluster (each namespace's slot on its own node) or on separate
servers behind one URL each shard (a cluster URL reaches them all) — and acts as
one: clients route each put by its queue (runtime.queue.site), one `runtime
worker` serves queues of several namespaces (runtime.master.shards).

The rule is `Settings.shards` (RUNTIME_SHARDS, `shards` in runtime.toml):

    ns1:queueA,queueB;ns2:queueC;ns3:*

each part a namespace and its queues; `*` takes every queue not named. Without
`*`, the queues not named live in the first namespace. An empty rule: no
sharding, every queue in `Settings.namespace`.

What cannot cross a shard is refused with `CrossShard` (a BadArgument naming
both namespaces): putting through one namespace's client into a queue of
another, a completion moving its job on (`next=`) to a queue of another
shard, a job put from a job (ctx.put) into a queue of another shard than the
job's, a dependency on a job of another shard.

Pure: no I/O, no redis import (children check their puts with it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from runtime import config
from runtime.errors import ConfigError, CrossShard

REST = "*"


@dataclass(frozen=True)
class Shards:
    """The rule, parsed: `table` {queue: namespace}, `rest` the namespace of every
    other queue, `namespaces` every namespace of the site, in the rule's order."""

    table: tuple[tuple[str, str], ...]
    rest: str
    namespaces: tuple[str, ...]

    @classmethod
    def parse(cls, rule: str, namespace: str = config.DEFAULT_NAMESPACE) -> Shards:
        """The Shards `rule` says; an empty rule puts every queue in `namespace`."""
        rule = rule.strip()
        if not rule:
            return cls((), namespace, (namespace,))
        table: dict[str, str] = {}
        namespaces: list[str] = []
        rest = ""
        for part in (p.strip() for p in rule.split(";")):
            if not part:
                continue
            name, colon, queues = (s.strip() for s in part.partition(":"))
            if not colon or not config.NAMESPACE_RE.match(name):
                raise ConfigError(f"shards: {part!r} is not namespace:queue[,queue...]")
            if name in namespaces:
                raise ConfigError(f"shards: namespace {name!r} is named twice")
            namespaces.append(name)
            for queue in (q.strip() for q in queues.split(",") if q.strip()):
                if queue == REST:
                    if rest:
                        raise ConfigError("shards: '*' may be given to one namespace only")
                    rest = name
                elif not config.QUEUE_NAME_RE.match(queue):
                    raise ConfigError(f"shards: bad queue name {queue!r}")
                elif queue in table:
                    raise ConfigError(f"shards: queue {queue!r} is in two namespaces")
                else:
                    table[queue] = name
        if not namespaces:
            raise ConfigError("shards: name at least one namespace:queue")
        return cls(tuple(table.items()), rest or namespaces[0], tuple(namespaces))

    @classmethod
    def of(cls, settings: config.Settings) -> Shards:
        return cls.parse(settings.shards, settings.namespace)

    @property
    def sharded(self) -> bool:
        return len(self.namespaces) > 1

    def namespace_of(self, queue: str) -> str:
        return dict(self.table).get(queue, self.rest)

    def split(self, queues: Iterable[str]) -> dict[str, tuple[str, ...]]:
        """The queues by namespace, in the site's order (namespaces without any left out)."""
        by: dict[str, list[str]] = {ns: [] for ns in self.namespaces}
        for queue in queues:
            by[self.namespace_of(queue)].append(queue)
        return {ns: tuple(qs) for ns, qs in by.items() if qs}

    def check(self, namespace: str, queue: str, what: str = "a job put") -> None:
        """CrossShard unless `queue` lives in `namespace` (a namespace outside the
        site, e.g. a client of a namespace the rule does not name, is not checked)."""
        if namespace not in self.namespaces:
            return
        home = self.namespace_of(queue)
        if home != namespace:
            raise CrossShard(
                f"{what} in shard {namespace!r} cannot go to queue {queue!r} of shard {home!r}: "
                "nothing crosses a shard (put it through the site, or keep both queues "
                "in one shard)"
            )
