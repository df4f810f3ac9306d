"""A sharded site: which namespace each queue lives in, by one rule.

A namespace is one Redis slot (keys.py), so one namespace is bounded by one
Redis core. A site spreads its queues over several namespaces — on the nodes
of a Redis Cluster (each namespace's slot on its own node) or on separate
servers behind one URL each shard (a cluster URL reaches them all) — and acts as
one: clients route each put by its queue (runtime.queue.api.client.Site), one `runtime
worker` serves queues of several namespaces (runtime.master.shards).

The rule is `Settings.shards` (RUNTIME_SHARDS, `shards` in runtime.toml):

    ns1:queueA,queueB;ns2:queueC;ns3:*

each part a namespace and its queues; `*` takes every queue not named. Without
`*`, the queues not named live in the first namespace. An empty rule: no
sharding, every queue in `Settings.namespace`. A namespace may live on a
Redis server of its own (separate servers, no Cluster): `namespace@URL:queues`,

    ns1@redis://a:6379/0:emails,sms;ns2@redis://b:6379/0:*

the URL running from the `@` to the part's last `:` (so it must be followed by
`:` and the queues, and cannot hold a `;`). A namespace without a URL lives
where the client's URL points (docs/redis.md, *Sharded sites*).

What cannot cross a shard is refused with `CrossShard` (a BadArgument naming
both namespaces): putting through one namespace's client into a queue of
another, a completion moving its job on (`next=`) to a queue of another
shard, a job put from a job (ctx.put) into a queue of another shard than the
job's, a dependency on a job of another shard.

Pure: no I/O, no redis import (children check their puts with it). The sums
of a site's numbers (`sum_counts`, `sum_groups`) are here too, shared by the
synchronous and the asyncio client.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from runtime import config
from runtime.errors import ConfigError, CrossShard

REST = "*"


@dataclass(frozen=True)
class Shards:
    """The rule, parsed: `table` {queue: namespace}, `rest` the namespace of every
    other queue, `namespaces` every namespace of the site, in the rule's order,
    `urls` {namespace: URL} of the namespaces on a server of their own."""

    table: tuple[tuple[str, str], ...]
    rest: str
    namespaces: tuple[str, ...]
    urls: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, rule: str, namespace: str = config.DEFAULT_NAMESPACE) -> Shards:
        """The Shards `rule` says; an empty rule puts every queue in `namespace`."""
        rule = rule.strip()
        if not rule:
            return cls((), namespace, (namespace,))
        table: dict[str, str] = {}
        namespaces: list[str] = []
        found_urls: dict[str, str] = {}
        rest = ""
        for part in (p.strip() for p in rule.split(";")):
            if not part:
                continue
            name, url, queues = _part(part)
            if name in namespaces:
                raise ConfigError(f"shards: namespace {name!r} is named twice")
            namespaces.append(name)
            if url:
                found_urls[name] = url
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
        urls = tuple(found_urls.items())
        return cls(tuple(table.items()), rest or namespaces[0], tuple(namespaces), urls)

    @classmethod
    def of(cls, settings: config.Settings) -> Shards:
        return cls.parse(settings.shards, settings.namespace)

    @property
    def sharded(self) -> bool:
        return len(self.namespaces) > 1

    def namespace_of(self, queue: str) -> str:
        return self._by_queue.get(queue, self.rest) if self.table else self.rest

    @functools.cached_property
    def _by_queue(self) -> dict[str, str]:
        return dict(self.table)

    def url_of(self, namespace: str) -> str | None:
        """The URL of the server `namespace` lives on, when the rule names one."""
        return dict(self.urls).get(namespace)

    def home(self, queues: Iterable[str]) -> str:
        """The one namespace these queues live in; CrossShard if they span several
        (one put_many is atomic in one shard only)."""
        homes = {self.namespace_of(q) for q in queues}
        if len(homes) > 1:
            raise CrossShard(
                f"one put_many is atomic in one shard, these jobs go to shards {sorted(homes)}: "
                "put them in one call per shard"
            )
        return homes.pop() if homes else self.namespaces[0]

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


def _part(part: str) -> tuple[str, str, str]:
    """One part of a rule: (namespace, its URL or "", its queues as written)."""
    name, colon, queues = (s.strip() for s in part.partition(":"))
    url = ""
    if "@" in name:  # namespace@URL:queues, the URL up to the last colon
        name, _, url = (s.strip() for s in part.partition("@"))
        url, colon, queues = (s.strip() for s in url.rpartition(":"))
        if "://" not in url or queues.isdigit():
            raise ConfigError(
                f"shards: {part!r} is not namespace@URL:queue[,queue...] "
                "(e.g. ns2@redis://b:6379/0:emails,sms)"
            )
    if not colon or not config.NAMESPACE_RE.match(name):
        raise ConfigError(f"shards: {part!r} is not namespace:queue[,queue...]")
    return name, url, queues


# --- a site's numbers, summed over its namespaces --------------------------------------

NOT_SUMMED = ("oldest_waiting_ms", "size_warning")  # the larger one is kept


def merge_count(state: str, into: Any, value: Any) -> Any:
    """One count of a queue found in two namespaces (put there before a change of
    the rule): summed, or the larger one, or either flag."""
    if into is None or value is None:
        return value if into is None else into
    if isinstance(value, bool) or isinstance(into, bool):
        return bool(into) or bool(value)
    return max(into, value) if state in NOT_SUMMED else into + value


def sum_counts(
    parts: Iterable[Mapping[str, Mapping[str, Any]]],
) -> dict[str, dict[str, Any]]:
    """Queues' counts by state ({queue: {state: count}}) of several namespaces, as one."""
    counts: dict[str, dict[str, Any]] = {}
    for part in parts:
        for queue, mine in part.items():
            into = counts.setdefault(queue, {})
            for state, value in mine.items():
                into[state] = merge_count(state, into.get(state), value)
    return counts


def sum_groups(parts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Failed jobs by group of several namespaces, as one."""
    groups: dict[str, int] = {}
    for part in parts:
        for group, count in part.items():
            groups[group] = groups.get(group, 0) + count
    return groups
