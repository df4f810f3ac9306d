"""The parts of a sharded site's client (runtime.queue.api.client.Site): `client.admin` and
`client.scheduling` over every namespace of the site. A queue's operations go
to its namespace, a job's to the namespace holding it, and lists and counts
are gathered from every namespace.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import date
from typing import Any, Protocol

from runtime.errors import NoSuchJob
from runtime.queue.api.admin import Admin
from runtime.queue.api.scheduling import Scheduling, follow
from runtime.queue.connection import Connection
from runtime.queue.job import Job
from runtime.queue.recur import Recurrence
from runtime.queue.shards import Shards, merge_count
from runtime.queue.stats import QueueStats, Throughput


class Member(Protocol):
    """One namespace's client of a site (a Client), as the parts use it."""

    @property
    def admin(self) -> Admin: ...

    @property
    def scheduling(self) -> Scheduling: ...


class Site(Protocol):
    """The site's client (runtime.queue.api.client.Site), as the parts use it."""

    @property
    def conn(self) -> Connection: ...

    @property
    def clients(self) -> Mapping[str, Member]: ...

    @property
    def shards(self) -> Shards: ...

    def shard(self, *, queue: str | None = None, jid: str | None = None) -> Member: ...

    def locate(self, jid: str) -> Member | None: ...


class SiteAdmin(Admin):
    """`client.admin` of a site: a queue's reads in its namespace, a job's in the
    namespace holding it, and the rest (failures, workers, domains, throughput,
    the metrics snapshot) over every namespace: a master serving several
    namespaces is one worker (one id registered in each), its jobs counted once
    each."""

    def __init__(self, site: Site) -> None:
        super().__init__(site.conn)
        self.site = site

    def _each(self) -> list[Admin]:
        return [client.admin for client in self.site.clients.values()]

    def _of(self, queue: str) -> Admin:
        return self.site.shard(queue=queue).admin

    def jobs(
        self, queue: str, state: str, start: int = 0, count: int = 25, oldest_first: bool = False
    ) -> tuple[int, list[Job]]:
        return self._of(queue).jobs(queue, state, start, count, oldest_first)

    def peek(self, queue: str, count: int = 10) -> list[Job]:
        return self._of(queue).peek(queue, count)

    def queue_known(self, queue: str) -> bool:
        return any(admin.queue_known(queue) for admin in self._each())

    def queue_forget(self, queue: str) -> bool:
        return self._of(queue).queue_forget(queue)

    def stats(self, queue: str, day: date | None = None) -> QueueStats:
        return self._of(queue).stats(queue, day)

    def trim_retention(self, batch: int | None = None) -> int:
        return sum(admin.trim_retention(batch) for admin in self._each())

    def failed_jobs(self, group: str, start: int = 0, count: int = 25) -> tuple[int, list[Job]]:
        """The namespaces' failures of `group` as one list, a namespace after another."""
        totals = [(admin, admin.failed_jobs(group, 0, 0)[0]) for admin in self._each()]
        page: list[Job] = []
        skip = start
        for admin, total in totals:
            if skip >= total:
                skip -= total
                continue
            if len(page) < count:
                page += admin.failed_jobs(group, skip, count - len(page))[1]
            skip = 0
        return sum(total for _, total in totals), page

    def unfail_own(self, group: str, count: int | None = None) -> int:
        moved = 0
        for admin in self._each():
            if count is None or moved < count:
                moved += admin.unfail_own(group, None if count is None else count - moved)
        return moved

    def unfail_all(self, group: str | None = None) -> int:
        return sum(admin.unfail_all(group) for admin in self._each())

    def delete_failed(self, group: str, batch: int = 1000) -> int:
        return sum(admin.delete_failed(group, batch) for admin in self._each())

    def config_set(self, name: str, value: str | float) -> float:
        """Sets the shared setting in every namespace (each shard's masters read their own)."""
        parsed = [admin.config_set(name, value) for admin in self._each()]
        return parsed[0]

    def config_unset(self, name: str) -> None:
        for admin in self._each():
            admin.config_unset(name)

    def domains(self, count: int = 1000) -> dict[str, dict[str, Any]]:
        """Each domain as the namespaces see it; throttled jobs summed."""
        merged: dict[str, dict[str, Any]] = {}
        for admin in self._each():
            for domain, info in admin.domains(count).items():
                into = merged.setdefault(domain, dict(info))
                if into is not info:
                    into["throttled"] = (into.get("throttled") or 0) + (info.get("throttled") or 0)
        return merged

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
        out: dict[str, Any] = {"now_ms": 0, "queues": {}, "groups": {}, "workers": {}}
        out["batches"] = {"open": 0, "oldest_ms": None}
        out["domains"] = {}
        for client in self.site.clients.values():
            part = client.admin.snapshot(up_s)
            out["now_ms"] = max(out["now_ms"], int(part.get("now_ms") or 0))
            _merge_batches(out["batches"], part.get("batches") or {})
            for domain, info in part.get("domains", {}).items():
                held = out["domains"].setdefault(domain, {"slots": 0, "concurrency": None})
                held["slots"] += info["slots"]  # each namespace enforces its own cap
                held["concurrency"] = info["concurrency"] or held["concurrency"]
            for queue, counts in part["queues"].items():
                into = out["queues"].get(queue)
                if into is None:
                    out["queues"][queue] = dict(counts)
                    continue
                for name, value in counts.items():
                    if name == "stats":
                        into["stats"] = _merge_stats(into.get("stats") or {}, value or {})
                    else:
                        into[name] = merge_count(name, into.get(name), value)
            for group, n in part["groups"].items():
                out["groups"][group] = out["groups"].get(group, 0) + n
            for wid, info in part["workers"].items():
                into = out["workers"].get(wid)
                if into is None:
                    out["workers"][wid] = dict(info)
                else:
                    into["seen_ms"] = max(into.get("seen_ms") or 0, info.get("seen_ms") or 0)
                    into["running"] = (into.get("running") or 0) + (info.get("running") or 0)
        return out


def _merge_batches(into: dict[str, Any], part: Mapping[str, Any]) -> None:
    """Open batches of two namespaces: summed, the oldest of both."""
    into["open"] += int(part.get("open") or 0)
    oldest = part.get("oldest_ms")
    if oldest is not None and (into["oldest_ms"] is None or oldest < into["oldest_ms"]):
        into["oldest_ms"] = int(oldest)


class SiteScheduling(Scheduling):
    """`client.scheduling` of a site: a job's operations in the namespace holding
    it, a recurrence in its queue's, lists gathered from every namespace, and
    domain limits set in each (each shard enforces its own)."""

    def __init__(self, site: Site) -> None:
        super().__init__(site.conn)
        self.site = site

    def _each(self) -> list[Scheduling]:
        return [client.scheduling for client in self.site.clients.values()]

    def _holding(self, jid: str) -> Scheduling:
        client = self.site.locate(jid)
        if client is None:
            raise NoSuchJob(f"no job {jid}")
        return client.scheduling

    def depend(self, jid: str, *on: str) -> str:
        return self._holding(jid).depend(jid, *on)

    def undepend(self, jid: str, *on: str) -> str:
        return self._holding(jid).undepend(jid, *on)

    def requeue(self, jid: str, queue: str | None = None) -> str:
        return self._holding(jid).requeue(jid, queue)

    def set_priority(self, jid: str, priority: int) -> str:
        return self._holding(jid).set_priority(jid, priority)

    def tag(self, jid: str, *tags: str) -> list[str]:
        return self._holding(jid).tag(jid, *tags)

    def untag(self, jid: str, *tags: str) -> list[str]:
        return self._holding(jid).untag(jid, *tags)

    def tagged(self, tag: str, start: int = 0, count: int = 25) -> tuple[int, list[Job]]:
        """The namespaces' jobs with `tag`, a namespace after another."""
        totals = [(part, part.tagged(tag, 0, 0)[0]) for part in self._each()]
        page: list[Job] = []
        skip = start
        for part, total in totals:
            if skip >= total:
                skip -= total
                continue
            if len(page) < count:
                page += part.tagged(tag, skip, count - len(page))[1]
            skip = 0
        return sum(total for _, total in totals), page

    def track(self, jid: str) -> None:
        self._holding(jid).track(jid)

    def untrack(self, jid: str) -> None:
        self._holding(jid).untrack(jid)

    def tracked(self) -> list[Job]:
        return [job for part in self._each() for job in part.tracked()]

    def events(self, idle_s: float | None = None) -> Iterator[dict[str, Any]]:
        """The events of tracked jobs of every namespace (a pub/sub channel each)."""
        return follow([part.conn for part in self._each()], idle_s)

    def recur(self, queue: str, klass: str | Any, data: Mapping[str, Any] | None = None,
              **options: Any) -> Recurrence:  # fmt: skip
        return self.site.shard(queue=queue).scheduling.recur(queue, klass, data, **options)

    def unrecur(self, id: str) -> bool:
        return any([part.unrecur(id) for part in self._each()])

    def recurrences(self) -> list[Recurrence]:
        found = [r for part in self._each() for r in part.recurrences()]
        return sorted(found, key=lambda r: r.id)

    def set_domain_limit(
        self,
        domain: str,
        rate: float | None = None,
        period: float = 1.0,
        burst: int | None = None,
        concurrency: int | None = None,
    ) -> None:
        """In every namespace: each shard enforces it on its own jobs, so a domain
        whose jobs run in N shards may start up to N times `rate` and run up to N
        times `concurrency` (keep a limited domain's queues in one shard)."""
        for part in self._each():
            part.set_domain_limit(domain, rate, period, burst, concurrency)

    def pause_domain(self, domain: str) -> None:
        for part in self._each():
            part.pause_domain(domain)

    def resume_domain(self, domain: str) -> None:
        for part in self._each():
            part.resume_domain(domain)

    def domain_limits(self) -> dict[str, dict[str, float]]:
        merged: dict[str, dict[str, float]] = {}
        for part in self._each():
            merged.update(part.domain_limits())
        return merged

    def clear_domain_limit(self, domain: str) -> None:
        for part in self._each():
            part.clear_domain_limit(domain)


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
