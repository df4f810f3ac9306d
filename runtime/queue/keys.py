"""Every Redis key of a deployment, built in one place.

A key is `{namespace}:` followed by one of the templates below. The braces make
the namespace a hash tag, so all keys of one deployment live in one Cluster slot
and a script may touch any of them. The Lua side does not spell keys itself: the
same templates are rendered into `lua/lib` functions by `lua_key_builders`.

Key schema (the kind of each key in brackets):

    jobs                     [hash]  jid -> job record: meta (JSON, or compact: lua/lib/job.lua),
                                     "\\n", data JSON
    config                   [hash]  shared setting -> value (see runtime.config.SHARED)
    names                    [hash]  the (queue, klass) pairs compact records name by
                                     number (lua/lib/compact.lua): "=<queue> <klass>" -> id
                                     (hex), "#<id>" -> "<queue> <klass>", count -> the
                                     last id; never shrinks (at most names_max pairs)
    queues                   [zset]  queue name -> first-use time (ms)
    q:<queue>                [hash]  paused, seq (order tickets), queued, throttled; totals
                                     (never reset by retention): total:completed,
                                     total:failed, total:retried (lua/lib/stats.lua); due,
                                     due_chk: when a pop must next scan (lua/lib/due.lua)
    q:<queue>:prios          [zset]  priorities that have ready lanes (score = priority)
    q:<queue>:ready:<prio>   [zset]  domains whose lane is ready (score = head's ticket)
    q:<queue>:lane:<prio>:<domain> [list] jids waiting, oldest first ('' = no domain)
    q:<queue>:throttled      [zset]  "<prio>|<domain>" lanes over their limit -> free at (us;
                                     9e15: when a slot frees or the domain resumes)
    q:<queue>:scheduled      [zset]  jid -> due time (us)
    q:<queue>:running        [zset]  jid -> lease expiry (us)
    q:<queue>:depends        [set]   jids waiting on other jobs
    q:<queue>:complete       [zset]  complete jids still kept by retention -> completion (ms)
    q:<queue>:failed         [zset]  failed jids of the queue -> failure time (ms)
    q:<queue>:cancelled      [zset]  the queue's tombstones (cancelled jobs) still kept by
                                     retention -> cancel time (ms)
    q:<queue>:idle           [zset]  masters waiting for the queue's jobs -> since (ms; a
                                     fraction: a slow link's first lease, handoff.lua)
    wake:<queue>             [list]  at most one token: an idle master BLPOPs it
    wake-worker:<worker>     [list]  jobs handed to an idle master (JSON), and tokens
    wake-waiter:<waiter>     [list]  at most one token: an asyncio client's shared waiter
                                     BLPOPs it with its jobs' wait:<jid> (runtime.queue.waiters)
    completed                [zset]  jid -> completion time (us), for retention
    cancelled                [zset]  tombstone jid -> cancel time (us), for retention
    output                   [hash]  jid -> the output tail of its last attempt (meta.ot)
    progress                 [hash]  jid -> its progress, JSON {"done","total","message",
                                     "at_ms"} (meta.pg; a new attempt starts without)
    q:<queue>:progressing    [zset]  running jobs that told their progress -> when (ms)
    live:<jid>               [stream] what a running job prints, as its master sends it
                                     (lua/live.lua): entries {o text, d lines dropped,
                                     a attempt}; capped, expires live_ttl_s after the last
    wait:<jid>               [list]  wake-up tokens for clients waiting on the job
                                     (client.wait), pushed when it ends; with a TTL
    cancel:<worker>          [channel] jids of jobs the worker holds that were cancelled
    failed                   [zset]  failure group -> failed jobs in it
    failed:<group>           [list]  jids, newest first
    tag:<tag>                [zset]  jid -> put time (ms)
    stats:<queue>:<day>      [hash]  wait and run times, histograms, counts (day: UTC days)
    throughput:<hour>        [hash]  jobs completed and failed for good in each minute of
                                     a UTC hour (hours since the epoch), all queues: minute
                                     of the hour (0-59) -> failed x 10^9 + completed;
                                     expires throughput_hours + 1 after its last new
                                     minute (lua/lib/stats.lua)
    unique:<key>             [string] jid of the job holding a unique key (TTL: unique_for)
    folded:<jid>             [string] the jid of the job that a running job's duplicate put
                                     (unique key) was folded into, under the jid that put
                                     was given (TTL: jobs-history; lua/lib/unique.lua)
    recur                    [hash]  recurrence id -> definition (JSON)
    q:<queue>:recur          [zset]  recurrence id -> its next tick (us)
    recur-ticks:<id>         [zset]  a cron recurrence's upcoming ticks (ms)
    tracked                  [zset]  jid -> time tracking began (ms)
    events                   [channel] tracked jobs' events, JSON
    workers                  [zset]  worker id -> last seen (ms; a pop refreshes it once a second)
    w:<worker>:jobs          [set]   jids leased by the worker
    w:<worker>:info          [string] what the master told of itself (JSON: host, pid,
                                     queues, concurrency, started_ms); expires (worker_info.lua)
    record-forms             [string] the fewest record forms a registered master reads,
                                     found by a put while compact-records is unset (kept
                                     10 s, and by the server that found it;
                                     lua/lib/compact.lua)
    deps:<jid>               [set]   jids this job waits on
    dependents:<jid>         [set]   jids waiting on this job
    domain-limits            [hash]  domain -> {"rate":..,"period":..,"burst":..,
                                     "concurrency":.., "paused":..} (each optional)
    domain-slots             [hash]  domain -> its jobs holding a lease now (no field: 0)
    domain-tat               [zset]  domain -> theoretical arrival time (us), GCRA
    domain-lanes:<domain>    [zset]  "<prio>|<queue>" of the domain's non-empty lanes (score 0)
    grace                    [hash]  post-outage grace window (lua/lib/lease.lua): from_us,
                                     resumed_us, until_us, prev_from_us, prev_resumed_us,
                                     worker; written by resumed.lua, expires at until_us
    batch:<bid>              [hash]  a batch (lua/lib/batch.lua): total, completed, failed,
                                     cancelled (counted as failed), sealed, created_ms,
                                     sealed_ms, settled_ms, desc; on_success, on_complete
                                     (callback spec JSON, "\\n", data JSON) and, once put,
                                     success_jid, complete_jid; expires jobs-history after
                                     it settled
    batch:<bid>:failed       [set]   the batch's jobs now failed (not the cancelled ones)
    batches                  [zset]  open batches (not yet settled) -> created (ms)
    test-clock               [string] frozen time (us); set only by tests, read only while
                                     the config hash has the field test-clock
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TEMPLATES: dict[str, str] = {
    "jobs": "jobs",
    "config": "config",
    "names": "names",
    "queues": "queues",
    "queue": "q:{queue}",
    "prios": "q:{queue}:prios",
    "ready": "q:{queue}:ready:{prio}",
    "lane": "q:{queue}:lane:{prio}:{domain}",
    "throttled": "q:{queue}:throttled",
    "scheduled": "q:{queue}:scheduled",
    "running": "q:{queue}:running",
    "depends": "q:{queue}:depends",
    "complete_index": "q:{queue}:complete",
    "failed_index": "q:{queue}:failed",
    "cancelled_index": "q:{queue}:cancelled",
    "idle": "q:{queue}:idle",
    "wake": "wake:{queue}",
    "worker_wake": "wake-worker:{worker}",
    "waiter_wake": "wake-waiter:{waiter}",
    "completed": "completed",
    "cancelled": "cancelled",
    "output": "output",
    "progress": "progress",
    "progressing": "q:{queue}:progressing",
    "live": "live:{jid}",
    "waited": "wait:{jid}",
    "cancels": "cancel:{worker}",
    "failed_groups": "failed",
    "failed": "failed:{group}",
    "tag": "tag:{tag}",
    "stats": "stats:{queue}:{day}",
    "throughput": "throughput:{hour}",
    "unique": "unique:{key}",
    "folded": "folded:{jid}",
    "recur": "recur",
    "recurring": "q:{queue}:recur",
    "recur_ticks": "recur-ticks:{id}",
    "tracked": "tracked",
    "events": "events",
    "workers": "workers",
    "worker_jobs": "w:{worker}:jobs",
    "worker_info": "w:{worker}:info",
    "record_forms": "record-forms",
    "deps": "deps:{jid}",
    "dependents": "dependents:{jid}",
    "domain_limits": "domain-limits",
    "domain_tat": "domain-tat",
    "domain_slots": "domain-slots",
    "domain_lanes": "domain-lanes:{domain}",
    "grace": "grace",
    "batch": "batch:{bid}",
    "batch_failed": "batch:{bid}:failed",
    "batches": "batches",
    "test_clock": "test-clock",
}

_FIELD = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class Keys:
    """Key builder for one namespace: `Keys("runtime").key("queue", queue="emails")`."""

    namespace: str

    @property
    def root(self) -> str:
        """The hash-tagged prefix; scripts receive it as KEYS[1]."""
        return "{" + self.namespace + "}"

    def key(self, name: str, **parts: object) -> str:
        return f"{self.root}:{TEMPLATES[name].format(**parts)}"

    def queue(self, queue: str) -> str:
        return self.key("queue", queue=queue)

    def wake(self, queue: str) -> str:
        return self.key("wake", queue=queue)

    def worker_wake(self, worker: str) -> str:
        return self.key("worker_wake", worker=worker)

    def waiter_wake(self, waiter: str) -> str:
        """An asyncio client's waiter's own list (runtime.queue.waiters)."""
        return self.key("waiter_wake", waiter=waiter)

    def waited(self, jid: str) -> str:
        return self.key("waited", jid=jid)

    def cancels(self, worker: str) -> str:
        return self.key("cancels", worker=worker)


def lua_key_builders() -> str:
    """The Lua twin of `Keys`: `K.jobs` for fixed keys, `K.lane(queue, prio, domain)`."""
    lines = ["local K = {}"]
    for name, template in TEMPLATES.items():
        fields = _FIELD.findall(template)
        split = _FIELD.split(":" + template)  # literal, field, literal, field ...
        pieces = [f"'{p}'" if i % 2 == 0 else p for i, p in enumerate(split)]
        body = " .. ".join(["NS", *(p for p in pieces if p != "''")])
        if fields:
            lines.append(f"K.{name} = function({', '.join(fields)}) return {body} end")
        else:
            lines.append(f"K.{name} = {body}")
    return "\n".join(lines)
