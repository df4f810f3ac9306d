"""The job context: the one argument a job's callable receives. What it says
(heartbeats, progress, jobs to put) goes to the master over the child's socket;
a child never holds a Redis connection."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime.children import protocol
from runtime.errors import BadArgument
from runtime.queue.shards import Shards
from runtime.queue.wire import JobSpec

PROGRESS_EVERY_S = 0.5  # at most two progress reports a second go out; the last one always


@dataclass(repr=False)
class JobContext:
    """What a job sees of itself. `sandbox` is its own directory, emptied after it."""

    jid: str
    klass: str
    queue: str
    data: dict[str, Any]
    attempt: int
    retries: int
    remaining: int
    sandbox: Path
    _send: Callable[[protocol.Message], None] = field(repr=False)
    _progress_at: float = field(default=-1e18, repr=False)
    _progress_held: protocol.Progress | None = field(default=None, repr=False)
    _shard: str = field(default="", repr=False)  # the job's namespace (a sharded site)
    _shards: Shards | None = field(default=None, repr=False)
    _batch: str | None = field(default=None, repr=False)  # the bid of the job's batch

    def __repr__(self) -> str:  # never data: reprs end up in logs and error reports
        return f"JobContext(jid={self.jid!r}, klass={self.klass!r}, attempt={self.attempt})"

    def heartbeat(self) -> None:
        """Tells the master "still alive": resets the job's timeout."""
        self._send(protocol.Heartbeat(self.jid))

    def progress(self, done: float, total: float | None = None, message: str | None = None) -> None:
        """Stores how far the job is on the job (`runtime job`, `job.progress`); tracked
        jobs publish it. Cheap to call often: at most two a second go out, the last
        one always (before the job's outcome)."""
        for name, value in (("done", done), ("total", total)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float)
            ):
                raise BadArgument(f"progress {name} must be a number, got {value!r}")
        if message is not None and not isinstance(message, str):
            raise BadArgument(f"progress message must be text, got {type(message).__name__}")
        report = protocol.Progress(self.jid, float(done), total, (message or "")[:1024] or None)
        now = time.monotonic()
        if now - self._progress_at >= PROGRESS_EVERY_S:
            self._progress_at, self._progress_held = now, None
            self._send(report)
        else:
            self._progress_held = report

    @property
    def batch(self) -> JobBatch | None:
        """The job's batch (None when it is in none): `ctx.batch.put(...)` adds a job to it."""
        return None if self._batch is None else JobBatch(self._batch, self)

    def put(
        self,
        target: Any,
        klass: Any = None,
        data: Mapping[str, Any] | None = None,
        *,
        now: bool = False,
        **options: Any,
    ) -> str:
        """Puts a job; returns its jid. By default it is put with this job's completion,
        in the same step, so a failed or retried attempt puts nothing and a retry never
        puts twice; `now=True` puts it at once. `target` is a queue name (then `klass`,
        `data` and put's options follow), a typed job (then its keyword arguments), or
        a JobSpec."""
        return self.put_spec(_spec_of(target, klass, data, options), now)

    def put_spec(self, spec: JobSpec, now: bool = False) -> str:
        """Puts the job `spec` describes (as `put` does); returns its jid."""
        if self._shards is not None:  # CrossShard: the master puts in the job's namespace only
            self._shards.check(self._shard, spec.queue, "a job put from a job")
        spec_json, data_json = spec.to_wire()
        self._send(protocol.Put(self.jid, spec_json, data_json, now=now))
        return str(spec.options["jid"])

    def flush(self) -> None:
        """The job is over: a progress report held back goes now."""
        if self._progress_held is not None:
            self._send(self._progress_held)
            self._progress_held = None


@dataclass(frozen=True)
class JobBatch:
    """The batch of a running job (`ctx.batch`). What it puts joins the batch and
    keeps it open until that job ends too, even once the batch is sealed."""

    bid: str
    context: JobContext = field(repr=False)

    def put(
        self,
        target: Any,
        klass: Any = None,
        data: Mapping[str, Any] | None = None,
        *,
        now: bool = False,
        **options: Any,
    ) -> str:
        """As `ctx.put` (with the completion by default, or `now=True`), into the batch."""
        spec = _spec_of(target, klass, data, options).in_batch(self.bid)
        return self.context.put_spec(spec, now)


def _spec_of(target: Any, klass: Any, data: Mapping[str, Any] | None, options: Any) -> JobSpec:
    """The job a put names: a queue name (then klass, data and put's options), a
    typed job (then its keyword arguments), or a JobSpec."""
    if isinstance(target, JobSpec):
        return target
    if isinstance(target, str):
        return JobSpec.build(target, klass, data, **options)
    if callable(getattr(target, "spec", None)):
        if klass is not None or data is not None:
            raise BadArgument("a typed job takes its arguments by keyword")
        spec = target.spec(**dict(options))
        if not isinstance(spec, JobSpec):
            raise BadArgument(f"{target!r}.spec() did not make a job")
        return spec
    raise BadArgument(f"put takes a queue name, a typed job or a JobSpec, got {target!r}")
