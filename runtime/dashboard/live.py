"""Live numbers: the rates sampler, the plot of the last hour and the small JSON the
pages poll.

`Rates` keeps the last few (time, jobs completed so far, jobs failed so far)
samples, taken every few seconds by a task of the server; the rates per second
shown on the overview are differences between samples. The plot of the last
hour is drawn from the jobs completed and failed per minute that the reports
count in Redis (`Client.throughput`), so every dashboard, on any host and from
its first page, draws the same history.

`GET live.json` answers {"values": {key: text}, "html": {key: markup}, "next_ms"}
for the keys a page shows (`data-live="key"` elements): the rates, a queue's
counts, a job's state, progress and result. The page's script replaces the texts
in place and asks again after next_ms: reads that take long (thousands of queues)
are asked for less often, as are the rates' samples.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from runtime.dashboard import plots
from runtime.dashboard.reads import QUEUE_STATES, QueueRow
from runtime.dashboard.render import number, pretty
from runtime.errors import Error
from runtime.queue.job import Job
from runtime.queue.stats import Throughput
from runtime.units import duration

log = logging.getLogger(__name__)

WINDOW_S = 3600.0  # what the plot covers
PLOT_MINUTES = 61  # minutes read for it: the hour and the minute it began in
RATE_SPAN_S = 10.0  # a rate is the average over about this long
LOAD_SHARE = 20  # reads of live numbers are spaced at least 20 times their own length
POLL_S = 2.0  # how often a page asks for its live numbers, at most


@dataclass(frozen=True)
class Sample:
    at_s: float  # time.monotonic()
    complete: int
    failed: int


class Rates:
    """Samples of the totals; rates per second from their differences."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.samples: deque[Sample] = deque(maxlen=int(RATE_SPAN_S / interval_s) + 2)

    def add(self, complete: int, failed: int, at_s: float | None = None) -> None:
        self.samples.append(Sample(time.monotonic() if at_s is None else at_s, complete, failed))

    def per_second(self) -> tuple[float | None, float | None]:
        """(completed, failed) per second over the last RATE_SPAN_S; None before two samples."""
        if len(self.samples) < 2:
            return None, None
        newest = self.samples[-1]
        older = next(
            (s for s in reversed(self.samples) if newest.at_s - s.at_s >= RATE_SPAN_S),
            self.samples[0],
        )
        span_s = newest.at_s - older.at_s
        return _rate(span_s, newest.complete - older.complete), _rate(
            span_s, newest.failed - older.failed
        )

    async def run(self, read: Callable[[], tuple[int, int]]) -> None:
        """Samples forever (a task of the server); a failed read is skipped. A read
        that takes long spaces the samples out: it keeps under 1/LOAD_SHARE of the time."""
        while True:
            start = time.monotonic()
            try:
                complete, failed = await asyncio.to_thread(read)
                self.add(complete, failed)
            except Error as err:
                log.warning("could not read the totals for the rates: %s", err)
            await asyncio.sleep(pause_s(self.interval_s, time.monotonic() - start))


def pause_s(interval_s: float, took_s: float) -> float:
    """How long to wait before the next read: the interval, or LOAD_SHARE times what
    the read took if that is longer (the dashboard's share of Redis stays small)."""
    return max(interval_s, LOAD_SHARE * took_s)


def _rate(span_s: float, change: int) -> float | None:
    return max(0, change) / span_s if span_s > 0 else None


def throughput_plot(seen: Throughput) -> Markup:
    """Jobs completed and failed per minute over the last hour, as steps: a minute's
    count from its start to its end (the current minute's, to now)."""
    done: list[tuple[float, float]] = []
    failed: list[tuple[float, float]] = []
    for start_ms, completed, failures in seen.minutes():
        start_s = max((start_ms - seen.now_ms) / 1000, -WINDOW_S)
        end_s = min((start_ms + 60_000 - seen.now_ms) / 1000, 0.0)
        if end_s > start_s:
            done.extend(((start_s, completed), (end_s, completed)))
            failed.extend(((start_s, failures), (end_s, failures)))
    ticks = [
        (-3600.0, "-60 min"),
        (-2700.0, "-45 min"),
        (-1800.0, "-30 min"),
        (-900.0, "-15 min"),
        (0.0, "now"),
    ]
    return plots.line_chart(
        [
            plots.Series("completed/min", "s-complete", done),
            plots.Series("failed/min", "s-failed", failed),
        ],
        (-WINDOW_S, 0.0),
        ticks,
        "Jobs completed and failed per minute, last hour",
        "/min",
    )


def rate_values(rates: Rates) -> dict[str, str]:
    complete, failed = rates.per_second()
    return {
        "rate.complete": number(None if complete is None else round(complete, 1)),
        "rate.failed": number(None if failed is None else round(failed, 1)),
    }


def queue_values(rows: Iterable[QueueRow]) -> dict[str, str]:
    values = {}
    for row in rows:
        for state in QUEUE_STATES:
            values[f"q.{row.name}.{state}"] = number(row.counts.get(state))
        values[f"q.{row.name}.size"] = number(row.size)
        values[f"q.{row.name}.latency"] = duration(row.latency_s)
        values[f"q.{row.name}.paused"] = "paused" if row.paused else "active"
    return values


LIVE_CHARS = 16 * 1024  # of a running job's output, on its page


def job_values(job: Job | None, live_text: str | None = None) -> dict[str, str]:
    """A job's changing fields (`live_text`: what it printed lately, running); the
    state "gone" once it is."""
    if job is None:
        return {"job.state": "gone"}
    progress, result = job.progress, job.result
    values = {
        "job.state": job.state,
        "job.attempt": str(job.attempt),
        "job.worker": job.worker or "-",
        "job.remaining": str(job.remaining),
        "job.progress": progress_text(progress),
    }
    if result is not None:
        values["job.result"] = pretty(result)
    if live_text is not None:
        values["job.live"] = live_text[-LIVE_CHARS:]
    return values


def progress_text(progress: Mapping[str, Any] | None) -> str:
    """ "3 / 10 (30 %) rendering", or "-" without progress."""
    if not isinstance(progress, Mapping):
        return "-"
    done, total = progress.get("done"), progress.get("total")
    text = str(done)
    if isinstance(total, int | float) and total and isinstance(done, int | float):
        text = f"{done} / {total} ({100 * done / total:.0f} %)"
    message = progress.get("message")
    return f"{text} {message}" if message else text


@contextlib.asynccontextmanager
async def sampling(rates: Rates, read: Callable[[], tuple[int, int]]) -> Any:
    """Runs the sampler while the server runs."""
    task = asyncio.create_task(rates.run(read))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
