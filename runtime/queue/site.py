"""Site: the client of a sharded site (runtime.queue.shards), one `Client` per
namespace over the same URL (a Redis Cluster URL reaches every node).

Puts go to the namespace of their queue; a jid is looked for in every
namespace (a job lives in its queue's namespace, found with one read each);
counts, queues and failures are summed over the namespaces, and so are what
`runtime status`, `runtime metrics` and the dashboard's numbers read (`admin`:
workers, throughput, progress, the metrics snapshot) when the settings name
shards. What cannot cross a shard raises `CrossShard` before anything is
written: one `put_many` over queues of two shards (a put is atomic in one shard
only), a dependency on a job of another shard. Domain limits are set in every
namespace alike: each shard enforces its own (see docs/redis.md, *Sharded
sites*).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, Self

from runtime import config
from runtime.errors import CrossShard
from runtime.queue.client import Client, Queue
from runtime.queue.connection import RETRY_FOR_S
from runtime.queue.job import Job
from runtime.queue.shards import Shards
from runtime.queue.stats import Throughput
from runtime.queue.wire import JobSpec


class Site:
    """Several namespaces acting as one deployment: `queue(name)` is the Queue of
    that queue's namespace; `clients` {namespace: Client} for everything else."""

    def __init__(
        self,
        url: str | None = None,
        *,
        shards: str | None = None,
        settings: config.Settings | None = None,
        retry_for_s: float = RETRY_FOR_S,
        **redis_kwargs: Any,
    ) -> None:
        if settings is None:
            settings = config.load_settings({"url": url, "shards": shards})
        self.settings = settings
        self.shards = Shards.of(settings)
        self.clients: dict[str, Client] = {}
        try:
            for namespace in self.shards.namespaces:
                self.clients[namespace] = Client(
                    settings=replace(settings, namespace=namespace),
                    retry_for_s=retry_for_s,
                    **redis_kwargs,
                )
        except BaseException:
            self.close()
            raise
        self.admin = SiteAdmin(self)

    def close(self) -> None:
        for client in self.clients.values():
            client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Site({', '.join(self.clients)})"

    # --- routing ------------------------------------------------------------------

    def client(self, queue: str) -> Client:
        """The client of the namespace `queue` lives in."""
        return self.clients[self.shards.namespace_of(queue)]

    @property
    def first(self) -> Client:
        """The client of the site's first namespace (e.g. for Redis's clock)."""
        return next(iter(self.clients.values()))

    def queue(self, name: str) -> SiteQueue:
        """The queue, in its namespace; its puts check dependencies across the site."""
        return SiteQueue(self, self.client(name), name)

    def locate(self, jid: str) -> Client | None:
        """The client of the namespace holding job `jid` (None: none holds it)."""
        for client in self.clients.values():
            if client.get_job(jid) is not None:
                return client
        return None

    # --- puts ------------------------------------------------------------------

    def put_many(self, specs: Iterable[JobSpec]) -> list[str]:
        """Puts jobs of one shard in one atomic call (Client.put_many); CrossShard if
        they span shards or one depends on a job of another shard."""
        specs = list(specs)
        if not specs:
            return []
        homes = {self.shards.namespace_of(s.queue) for s in specs}
        if len(homes) > 1:
            raise CrossShard(
                f"one put_many is atomic in one shard, these jobs go to shards {sorted(homes)}: "
                "put them in one call per shard"
            )
        home = self.clients[homes.pop()]
        self._check_depends(home, specs)
        return home.put_many(specs)

    def _check_depends(self, home: Client, specs: list[JobSpec]) -> None:
        """CrossShard for a dependency that `home` does not hold and another shard does
        (one unknown anywhere is left to the put, which refuses it as unknown)."""
        own = {s.options["jid"] for s in specs}
        wanted = [d for s in specs for d in s.options.get("depends", ()) if d not in own]
        if not wanted:
            return
        found = home.get_jobs(wanted)
        for jid in (d for d, job in zip(wanted, found, strict=True) if job is None):
            for namespace, other in self.clients.items():
                if other is not home and other.get_job(jid) is not None:
                    raise CrossShard(
                        f"a job put in shard {home.keys.namespace!r} cannot depend on job "
                        f"{jid} of shard {namespace!r}: dependencies do not cross shards"
                    )

    # --- jobs by jid ------------------------------------------------------------

    def get_job(self, jid: str) -> Job | None:
        client = self.locate(jid)
        return None if client is None else client.get_job(jid)

    def get_jobs(self, jids: list[str]) -> list[Job | None]:
        found: list[Job | None] = [None] * len(jids)
        for client in self.clients.values():
            missing = [i for i, job in enumerate(found) if job is None]
            if not missing:
                break
            for i, job in zip(missing, client.get_jobs([jids[i] for i in missing]), strict=True):
                found[i] = job
        return found

    def wait(self, jid: str, timeout: float | None = None) -> Any:
        """Client.wait in the namespace holding the job (NoSuchJob if none does)."""
        client = self.locate(jid) or next(iter(self.clients.values()))
        return client.wait(jid, timeout)

    def message_status(self, jid: str) -> str | None:
        client = self.locate(jid)
        return None if client is None else client.message_status(jid)

    def cancel(self, *jids: str) -> list[str]:
        """Cancels the jobs, each in its namespace (one call per namespace)."""
        by: dict[str, list[str]] = {}
        for jid, job in zip(jids, self.get_jobs(list(jids)), strict=True):
            if job is not None:
                by.setdefault(self.shards.namespace_of(job.queue), []).append(jid)
        return [done for ns, mine in by.items() for done in self.clients[ns].cancel(*mine)]

    # --- counts, failures, domains -------------------------------------------------

    def queues(self) -> list[str]:
        return sorted({q for client in self.clients.values() for q in client.queues()})

    def status(self, *queues: str) -> dict[str, dict[str, int | bool]]:
        """Counts by state for the queues (all queues of every namespace when none are
        named); a queue found in two namespaces (put there before a change of the
        rule) has its counts summed."""
        parts = (
            [c.status() for c in self.clients.values()]
            if not queues
            else [self.clients[ns].status(*qs) for ns, qs in self.shards.split(queues).items()]
        )
        counts: dict[str, dict[str, int | bool]] = {}
        for part in parts:
            for queue, mine in part.items():
                into = counts.setdefault(queue, {})
                for state, value in mine.items():
                    into[state] = _merge(state, into.get(state), value)
        return counts

    def failed(self) -> dict[str, int]:
        """Failed jobs by group, summed over the namespaces."""
        groups: dict[str, int] = {}
        for client in self.clients.values():
            for group, count in client.failed().items():
                groups[group] = groups.get(group, 0) + count
        return groups

    def unfail(self, group: str, queue: str | None, count: int = 25) -> int:
        """Moves up to `count` failed jobs of `group` back: to `queue` from its own
        namespace only (failures never cross a shard), or (None) each to its own
        queue, namespace by namespace."""
        if queue is not None:
            return self.client(queue).unfail(group, queue, count)
        moved = 0
        for client in self.clients.values():
            if moved < count:
                moved += client.unfail(group, None, count - moved)
        return moved

    def set_domain_limit(
        self,
        domain: str,
        rate: float | None = None,
        period: float = 1.0,
        burst: int | None = None,
        concurrency: int | None = None,
    ) -> None:
        """Sets the limit in every namespace: each shard enforces it on its own jobs,
        so a domain whose jobs run in N shards may start up to N times `rate`, and
        run up to N times `concurrency` (keep a limited domain's queues in one shard)."""
        for client in self.clients.values():
            client.set_domain_limit(domain, rate, period, burst, concurrency)

    def pause_domain(self, domain: str) -> None:
        """Pauses the domain in every namespace (client.scheduling.pause_domain)."""
        for client in self.clients.values():
            client.scheduling.pause_domain(domain)

    def resume_domain(self, domain: str) -> None:
        for client in self.clients.values():
            client.scheduling.resume_domain(domain)


class SiteAdmin:
    """What `client.admin` reads for status, metrics and the dashboard's numbers,
    over every namespace of a site: a master serving several namespaces is one
    worker (one id registered in each), its jobs counted once each."""

    def __init__(self, site: Site) -> None:
        self.site = site

    def workers(self) -> dict[str, dict[str, Any]]:
        merged: dict[str, dict[str, Any]] = {}
        for client in self.site.clients.values():
            for wid, info in client.admin.workers().items():
                into = merged.get(wid)
                merged[wid] = dict(info) if into is None else _merge_worker(into, info)
        return dict(sorted(merged.items(), key=lambda kv: -int(kv[1].get("seen_ms") or 0)))

    def throughput(self, minutes: int = 60) -> Throughput:
        """Each minute's completions and final failures, summed (minutes are aligned
        on their start: servers' clocks may differ by a little)."""
        parts = [c.admin.throughput(minutes) for c in self.site.clients.values()]
        base = max(parts, key=lambda t: t.from_ms)
        completed, failed = [0] * len(base.completed), [0] * len(base.failed)
        for part in parts:
            shift = round((part.from_ms - base.from_ms) / 60_000)
            for i, (done, lost) in enumerate(zip(part.completed, part.failed, strict=True)):
                if 0 <= i + shift < len(completed):
                    completed[i + shift] += done
                    failed[i + shift] += lost
        return Throughput(base.now_ms, base.from_ms, tuple(completed), tuple(failed))

    def progressing(self, *queues: str, count: int = 10) -> list[Job]:
        shards = self.site.shards
        if queues:
            parts = [
                self.site.clients[ns].admin.progressing(*qs, count=count)
                for ns, qs in shards.split(queues).items()
            ]
        else:
            parts = [c.admin.progressing(count=count) for c in self.site.clients.values()]
        return [job for part in parts for job in part]

    def snapshot(self, up_s: float = 60.0) -> dict[str, Any]:
        """One metrics snapshot (Admin.snapshot) of each namespace, summed: queues'
        counts and today's statistics, failure groups, and workers (a worker in
        several namespaces is one, running the jobs of all)."""
        out: dict[str, Any] = {
            "now_ms": 0, "queues": {}, "groups": {}, "workers": {}, "domains": {},
        }  # fmt: skip
        for client in self.site.clients.values():
            part = client.admin.snapshot(up_s)
            out["now_ms"] = max(out["now_ms"], int(part.get("now_ms") or 0))
            for queue, counts in part["queues"].items():
                into = out["queues"].get(queue)
                if into is None:
                    out["queues"][queue] = dict(counts)
                    continue
                for name, value in counts.items():
                    if name == "stats":
                        into["stats"] = _merge_stats(into.get("stats") or {}, value or {})
                    else:
                        into[name] = _merge(name, into.get(name), value)
            for group, n in part["groups"].items():
                out["groups"][group] = out["groups"].get(group, 0) + n
            for wid, info in part["workers"].items():
                into = out["workers"].get(wid)
                if into is None:
                    out["workers"][wid] = dict(info)
                else:
                    into["seen_ms"] = max(into.get("seen_ms") or 0, info.get("seen_ms") or 0)
                    into["running"] = (into.get("running") or 0) + (info.get("running") or 0)
            for domain, info in part.get("domains", {}).items():
                held = out["domains"].setdefault(domain, {"slots": 0, "concurrency": None})
                held["slots"] += info["slots"]  # each namespace enforces its own cap
                held["concurrency"] = info["concurrency"] or held["concurrency"]
        return out


def _merge_worker(into: dict[str, Any], info: Mapping[str, Any]) -> dict[str, Any]:
    """One worker registered in two namespaces: its jobs of both, seen when last seen."""
    into["seen_ms"] = max(into.get("seen_ms") or 0, info.get("seen_ms") or 0)
    into["jobs"] = [*into.get("jobs", ()), *info.get("jobs", ())]
    into["running"] = [*into.get("running", ()), *info.get("running", ())]
    into["queues"] = sorted({*into.get("queues", ()), *info.get("queues", ())})
    for name in ("host", "pid", "concurrency", "started_ms"):
        if into.get(name) is None:
            into[name] = info.get(name)
    into["told"] = bool(into.get("told")) or bool(info.get("told"))
    return into


def _merge_stats(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Today's statistics of one queue kept in two namespaces (a queue put there
    before the rule changed): histograms, counts and sums (ms, ms2) summed, the
    moments of days written by earlier versions (n, mean, m2: lib/stats.lua)
    combined."""
    out = {**a}
    for name, value in b.items():
        out[name] = out.get(name, 0) + value
    for what in {name.split(":", 1)[0] for name in out}:
        n1, n2 = float(a.get(f"{what}:n", 0)), float(b.get(f"{what}:n", 0))
        if not n1 or not n2:
            for moment in ("n", "mean", "m2"):
                key = f"{what}:{moment}"
                if key in a or key in b:
                    out[key] = (a if n1 else b).get(key, 0)
            continue
        m1, m2 = float(a.get(f"{what}:mean", 0)), float(b.get(f"{what}:mean", 0))
        n, delta = n1 + n2, m2 - m1
        out[f"{what}:n"] = n
        out[f"{what}:mean"] = m1 + delta * n2 / n
        out[f"{what}:m2"] = (
            float(a.get(f"{what}:m2", 0)) + float(b.get(f"{what}:m2", 0)) + delta**2 * n1 * n2 / n
        )
    return out


class SiteQueue(Queue):
    """A Queue of a site: puts through `Site.put_many` (dependencies checked across
    shards), everything else in the queue's namespace."""

    def __init__(self, site: Site, client: Client, name: str) -> None:
        super().__init__(client, name)
        self.site = site

    def put(self, klass: str | Any, data: Mapping[str, Any] | None = None, **options: Any) -> str:
        return self.site.put_many([self.spec(klass, data, **options)])[0]


NOT_SUMMED = ("oldest_waiting_ms", "size_warning")  # the larger one is kept


def _merge(state: str, into: int | bool | None, value: int | bool) -> int | bool:
    if into is None or value is None:
        return value if into is None else into
    if isinstance(value, bool) or isinstance(into, bool):
        return bool(into) or bool(value)
    return max(into, value) if state in NOT_SUMMED else into + value
