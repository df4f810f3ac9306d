"""The master's arithmetic, as pure functions of plain values: how far ahead to
lease, how deep a child's pipeline may be, when a lease is renewed, until when a
job leased ahead may still start, when a job must stop because its lease could
not be renewed, and how long to back off.

Nothing here reads a clock or touches a process: the book (book.py) passes the
numbers in, and the unit tests do the same.
"""

from __future__ import annotations

import math
import random

PREFETCH_MAX_JOB_S = 0.05  # lease ahead only while jobs take less than this on average
PREFETCH_WINDOW_S = 0.01  # by default lease about this much work ahead (short jobs)
PREFETCH_MAX = 64  # the most jobs leased ahead by default
PIPELINE_MAX_JOB_S = 0.005  # queue a job behind a running one only below this average
DEEP_PIPELINE_JOB_S = 0.001  # ... two of them below this
RENEW_AFTER = 0.15  # renew a lease once this share of it has passed
START_SHARE = 0.1  # a job leased ahead starts only with this share of its lease left to run
BACKOFF_FIRST_S = 0.05  # the first wait after Redis failed us
BACKOFF_CAP_S = 2.0  # the longest wait between two tries
BACKOFF_LEASE_SHARE = 0.1  # while holding leases, never wait longer than this share of one


def safety_margin(lease_s: float) -> float:
    """How long before its lease runs out a job must be stopped if not renewed."""
    return min(2.0, lease_s * 0.2)


def stop_before(lease_until: float, lease_s: float) -> float:
    """The deadline a child gets for a job: it stops itself then, unless renewed."""
    return lease_until - safety_margin(lease_s)


def start_before(lease_until: float, length_s: float) -> float:
    """The latest time a job leased ahead may start: a tenth (START_SHARE) of the
    lease it holds (`length_s`: shorter than the queue's for a job handed to an idle
    master, until renewed) before its stop deadline. Leases are renewed long before
    that, so only a job whose lease could not be renewed (Redis out of reach) comes
    so close: started, it would stop itself at once and spend a retry for nothing;
    given back unstarted, it spends none."""
    return start_before_stop(stop_before(lease_until, length_s), length_s)


def start_before_stop(stop_at: float, length_s: float) -> float:
    """start_before, from the stop deadline (stop_before) already worked out."""
    return stop_at - length_s * START_SHARE


def kill_at(lease_until: float, lease_s: float) -> float:
    """When the master kills a child whose job's lease could not be renewed: after
    the child's own deadline (it should have stopped), well before Redis's expiry."""
    return lease_until - safety_margin(lease_s) / 2


def renew_at(lease_until: float, length_s: float) -> float:
    """When to renew a lease of `length_s` that holds until `lease_until`. Early
    (a fifth gone), so that Redis refusing writes for half a lease, and the retries
    after it, still end before any job has to stop."""
    return lease_until - length_s * (1 - RENEW_AFTER)


def warm(jobs_seen: int, children: int, avg_run_s: float) -> bool:
    """Whether jobs are known to be short enough to lease ahead."""
    return jobs_seen >= max(1, children) and avg_run_s < PREFETCH_MAX_JOB_S


def pipeline_depth(jobs_seen: int, children: int, avg_run_s: float, most: int) -> int:
    """Jobs a busy child may hold behind its running one."""
    if not warm(jobs_seen, children, avg_run_s) or avg_run_s >= PIPELINE_MAX_JOB_S:
        return 0
    return min(2 if avg_run_s < DEEP_PIPELINE_JOB_S else 1, most)


def prefetch(jobs_seen: int, children: int, avg_run_s: float, fixed: int | None) -> int:
    """Jobs to lease ahead of the children: only while jobs are short, since a job
    leased ahead waits behind the running ones. `fixed`: the --prefetch option."""
    if not warm(jobs_seen, children, avg_run_s):
        return 0
    if fixed is not None:
        return fixed
    children = max(1, children)
    window = math.ceil(children * PREFETCH_WINDOW_S / max(avg_run_s, 1e-6))
    return min(PREFETCH_MAX, max(children, window))


def pipeline_room(depth: int, queued: int, jobs_done: int, max_jobs: int | None) -> int:
    """Jobs a child's pipeline may take: never past its --max-jobs-per-child."""
    room = depth - queued
    if max_jobs:
        room = min(room, max_jobs - jobs_done - 1 - queued)
    return max(0, room)


def average(avg_s: float, seen: int, took_s: float) -> float:
    """The running average of job run times (the first one counts whole)."""
    return took_s if seen == 0 else 0.9 * avg_s + 0.1 * took_s


def backoff_s(failures: int, shortest_lease_s: float | None, rng: random.Random) -> float:
    """How long to wait before trying Redis again: doubling from BACKOFF_FIRST_S up to
    a cap, scaled by a jitter in (0.75, 1] so masters that lost Redis together do not
    come back in lockstep. While leases are held the cap shrinks with the shortest
    one, so a renewal still lands before its jobs must stop."""
    cap = BACKOFF_CAP_S
    if shortest_lease_s is not None:
        cap = min(cap, max(0.02, shortest_lease_s * BACKOFF_LEASE_SHARE))
    base = min(cap, BACKOFF_FIRST_S * 2.0 ** min(failures, 16))
    return base * (0.75 + 0.25 * rng.random())
