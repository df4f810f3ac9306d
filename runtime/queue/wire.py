"""What goes over the wire to the scripts, and what comes back: encoding and
the client-side checks, shared by the synchronous and the asyncio client.

The scripts check every argument again; the checks here give Python callers a
typed error before a round trip, with the same limits (runtime.config.LIMITS).
"""

from __future__ import annotations

import json
import math
import os
import secrets
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, NoReturn, TypedDict

from runtime import config
from runtime.errors import LUA_ERROR_CODES, BadArgument, Error, LeaseLost

LIMITS = config.LIMITS
COMPACT = (",", ":")
# one encoder for every call (json.dumps with options builds one per call)
_encode = json.JSONEncoder(separators=COMPACT, ensure_ascii=False, allow_nan=False).encode


def dumps(value: Any) -> str:
    return _encode(value)


def check_queue(name: str) -> str:
    if not isinstance(name, str) or not config.QUEUE_NAME_RE.match(name):
        raise BadArgument(
            f"queue name must be 1-128 characters without blanks, '{{', '}}' or ':', got {name!r}"
        )
    return name


def check_int(what: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise BadArgument(f"{what} must be an integer in [{lo}, {hi}], got {value!r}")
    return value


def check_priority(priority: Any) -> int:
    return check_int("priority", priority, LIMITS["priority_min"], LIMITS["priority_max"])


def check_count(count: Any) -> int:
    return check_int("count", count, 0, LIMITS["pop_max"])


def check_seconds(what: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadArgument(f"{what} must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise BadArgument(f"{what} must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


def delay_ms(delay: float | None) -> int:
    """Milliseconds for the scripts; -1 (use the backoff policy) for None."""
    if delay is None:
        return -1
    return round(check_seconds("delay", delay) * 1000)


def idle_arg(idle: bool, rtt_s: float) -> int:
    """A pop's idle argument (pop.lua): 0, or for a master that will wait, its
    round trip to Redis in ms (at least 1, at most idle_rtt_max_ms)."""
    if not idle:
        return 0
    return max(1, min(round(rtt_s * 1000), LIMITS["idle_rtt_max_ms"]))


def seed() -> str:
    """Fresh randomness for the lease tokens of one pop."""
    return secrets.token_hex(8)


def klass_path(klass: Any) -> str:
    """A klass as given ("pkg.mod:func"), or the import path of a function."""
    if isinstance(klass, str):
        return klass
    module, qualname = getattr(klass, "__module__", None), getattr(klass, "__qualname__", None)
    if not module or not qualname or "<" in qualname:
        raise BadArgument(f"klass must be an import path or a module-level function, got {klass!r}")
    return f"{module}:{qualname}"


def nested_deeper_than(value: Any, limit: int) -> bool:
    """True when `value` nests more than `limit` dicts and lists (a dict of
    scalars is 1 level deep): the scripts' rule (data_depth_max), walked
    without recursion, so it also stops at a dict that contains itself."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list | tuple))
    return False


def utf8_text(what: str, text: str) -> str:
    """`text`, refused when it cannot be sent as UTF-8 (lone surrogates)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        bad = text[err.start : err.end].encode("utf-8", "backslashreplace").decode()
        raise BadArgument(f"{what} holds {bad}, a lone surrogate: not valid Unicode text") from None
    return text


def encode_data(data: Mapping[str, Any] | None) -> str:
    """Job data as the JSON text the scripts store; BadArgument (one line) for
    anything they would refuse or Python could not send."""
    if data is None:
        return "{}"
    if type(data) is not dict:
        if not isinstance(data, Mapping):
            raise BadArgument(f"data must be a JSON object (a dict), got {type(data).__name__}")
        data = dict(data)
    depth_max = LIMITS["data_depth_max"]
    try:
        text = _encode(data)
    except (TypeError, ValueError, RecursionError) as err:
        if nested_deeper_than(data, depth_max):  # a cycle too: told as too deep
            raise BadArgument(
                f"data is nested deeper than {depth_max} levels (data_depth_max)"
            ) from None
        first_line = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise BadArgument(f"data is not JSON: {first_line}") from None
    # each level of nesting opens a bracket: text with few cannot nest too deep
    if text.count("{") + text.count("[") > depth_max and nested_deeper_than(data, depth_max):
        raise BadArgument(f"data is nested deeper than {depth_max} levels (data_depth_max)")
    return text if text.isascii() else utf8_text("data", text)


def epoch_ms(at: Any) -> int:
    if isinstance(at, datetime):
        if at.tzinfo is None:
            raise BadArgument("at must be a timezone-aware datetime (or epoch seconds)")
        return round(at.timestamp() * 1000)
    return round(check_seconds("at", at) * 1000)


def _positive_ms(what: str, seconds: Any) -> int:
    """Seconds as whole milliseconds, at least 1 and at most delay_max_ms."""
    ms = math.ceil(check_seconds(what, seconds) * 1000)
    if not 1 <= ms <= LIMITS["delay_max_ms"]:
        raise BadArgument(f"{what} must be above 0 and at most ten years, got {seconds!r}")
    return ms


_ABSENT = object()
# Options put.lua takes as these when a spec leaves them out.
_WIRE_DEFAULTS: dict[str, Any] = {
    "priority": 0,
    "retries": config.DEFAULT_RETRIES,
    "tags": [],
    "depends": [],
    "domain": None,
    "unique_key": None,
    "tracked": False,
}


def _trace_parent() -> str | None:
    """The W3C traceparent of the span active where a job is put, or None. Without
    opentelemetry loaded no span can be active: one dict look-up, nothing
    imported (docs/operating.md, "Tracing")."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    flags = int(context.trace_flags)
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags:02x}"


def _flow_options(
    options: dict[str, Any], expires_in: float | None, debounce: float | None, timed: bool
) -> None:
    """A put's flow controls into its options (expires_in_ms, debounce_ms), checked:
    debounce needs the job's unique_key and no delay, at or requeue_if_running."""
    if expires_in is not None:
        options["expires_in_ms"] = _positive_ms("expires_in", expires_in)
    if debounce is not None:
        if options["unique_key"] is None:
            raise BadArgument("debounce needs a unique_key")
        if timed or options.get("requeue_if_running"):
            raise BadArgument("give debounce without delay, at or requeue_if_running")
        options["debounce_ms"] = _positive_ms("debounce", debounce)


class JobOptions(TypedDict, total=False):
    """A put's options, the keywords of `Queue.put` and `AsyncQueue.put` (and of
    JobSpec.build after the queue): written once, typed for both."""

    priority: int
    delay: float
    at: datetime | float
    tags: Iterable[str]
    retries: int
    depends: Iterable[str]
    domain: str | None
    unique_key: str | None
    unique_for: float | None
    requeue_if_running: bool
    jid: str | None
    backoff: tuple[float, float] | None
    timeout: float | None
    tracked: bool
    expires_in: float | None
    debounce: float | None


@dataclass(frozen=True)
class JobSpec:
    """One job to put, checked and encoded (build it with `Queue.spec`)."""

    queue: str
    klass: str
    data_json: str
    options: Mapping[str, Any]

    @classmethod
    def build(
        cls,
        queue: str,
        klass: Any,
        data: Mapping[str, Any] | None = None,
        *,
        priority: int = 0,
        delay: float = 0,
        at: Any = None,
        tags: Iterable[str] = (),
        retries: int = config.DEFAULT_RETRIES,
        depends: Iterable[str] = (),
        domain: str | None = None,
        unique_key: str | None = None,
        unique_for: float | None = None,
        requeue_if_running: bool = False,
        jid: str | None = None,
        backoff: tuple[float, float] | None = None,
        timeout: float | None = None,
        tracked: bool = False,
        expires_in: float | None = None,
        debounce: float | None = None,
    ) -> JobSpec:
        if isinstance(tags, str) or isinstance(depends, str):
            raise BadArgument("tags and depends must be lists of strings, not one string")
        options: dict[str, Any] = {
            "jid": jid if jid is not None else os.urandom(16).hex(),  # secrets.token_hex(16)
            "priority": 0 if priority == 0 and type(priority) is int else check_priority(priority),
            "retries": retries
            if type(retries) is int and 0 <= retries <= LIMITS["retries_max"]
            else check_int("retries", retries, 0, LIMITS["retries_max"]),
            "tags": list(tags),
            "depends": list(depends),
            "domain": domain,
            "unique_key": unique_key,
            "tracked": bool(tracked),
        }
        if unique_for is not None:
            options["unique_for"] = check_seconds("unique_for", unique_for)
        if requeue_if_running:
            options["requeue_if_running"] = True
        if at is not None:
            if delay:
                raise BadArgument("give delay or at, not both")
            options["at_ms"] = epoch_ms(at)
        elif delay:
            options["delay_ms"] = round(check_seconds("delay", delay) * 1000)
        if backoff is not None:
            lo, hi = (check_seconds("backoff", b) for b in backoff)
            options["backoff"] = [lo, hi]
        if timeout is not None:
            options["timeout_s"] = check_seconds("timeout", timeout)
        traceparent = _trace_parent()
        if traceparent is not None:
            options["traceparent"] = traceparent
        if expires_in is not None or debounce is not None:
            _flow_options(options, expires_in, debounce, at is not None or bool(delay))
        return cls(check_queue(queue), klass_path(klass), encode_data(data), options)

    def in_batch(self, bid: str) -> JobSpec:
        """This job as a job of the batch `bid` (runtime.queue.api.batches)."""
        other = self.options.get("batch")
        if other is not None and other != bid:
            raise BadArgument(f"job {self.options['jid']} is already for batch {other}")
        return replace(self, options={**self.options, "batch": bid})

    def to_wire(self) -> list[str]:
        """[spec JSON, data JSON] for put.lua; options at their default are left
        out (the script applies the same defaults), so the spec stays short."""
        spec = {"queue": self.queue, "klass": self.klass}
        for name, value in self.options.items():
            if value != _WIRE_DEFAULTS.get(name, _ABSENT):
                spec[name] = value
        try:
            text = _encode(spec)
        except (TypeError, ValueError, RecursionError) as err:
            raise BadArgument(f"job options are not JSON: {err}") from None
        if not text.isascii():
            utf8_text("the job's options", text)
        return [text, self.data_json]


def complete_options(
    next: str | None,
    delay: float | None,
    depends: Iterable[str],
    note: str | None = None,
    puts: Iterable[Sequence[str]] = (),
) -> str:
    """A completion's options (complete.lua) as JSON."""
    options: dict[str, Any] = {}
    if next is not None:
        options["next"] = check_queue(next)
    if delay is not None:
        options["delay_ms"] = round(check_seconds("delay", delay) * 1000)
    deps = list(depends)
    if deps:
        options["depends"] = deps
    return _with_extras(options, note, puts)


def report_options(note: str | None, puts: Iterable[Sequence[str]]) -> str:
    """A master's completion options: a history note and the jobs put with it."""
    return _with_extras({}, note, puts)


def _with_extras(options: dict[str, Any], note: str | None, puts: Iterable[Sequence[str]]) -> str:
    pairs = [[str(spec), str(data)] for spec, data in puts]
    if len(pairs) > LIMITS["puts_max"]:
        raise BadArgument(f"a completion puts at most {LIMITS['puts_max']} jobs, got {len(pairs)}")
    if pairs:
        options["puts"] = pairs
    if note:
        options["note"] = cap_head(note, LIMITS["note_max_bytes"])
    if not options:
        return "{}"
    return utf8_text("the completion's options", dumps(options))


def result_json(result: Any) -> str:
    """A job's return value as the JSON text complete.lua stores ("" for None)."""
    if result is None:
        return ""
    try:
        return utf8_text("the result", dumps(result))
    except (TypeError, ValueError, RecursionError) as err:
        raise BadArgument(f"the result is not JSON: {err}") from None


def check_progress(value: Any) -> float:
    """A progress count (done, total): a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadArgument(f"progress must be numbers, got {value!r}")
    if not math.isfinite(value) or not 0 <= value <= 1e15:
        raise BadArgument(f"progress must be finite numbers in [0, 1e15], got {value!r}")
    return value


def put_with_by(spec_json: str, by: str | None) -> tuple[str, str]:
    """(its jid, the spec naming the job putting it) for a put spec (JobSpec.to_wire()[0])."""
    try:
        spec = json.loads(spec_json)
    except ValueError as err:
        raise BadArgument(f"a put's spec is not JSON: {err}") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("jid"), str):
        raise BadArgument("a put's spec must be a JSON object with its jid")
    return spec["jid"], spec_json if by is None else dumps({**spec, "by": by})


def cap_head(text: str, cap: int) -> str:
    """`text` cut to its first `cap` bytes of UTF-8."""
    raw = text.encode("utf-8", "replace")
    return text if len(raw) <= cap else raw[:cap].decode("utf-8", "ignore")


def cap_output(output: str) -> str:
    """An attempt's output cut to the scripts' cap, keeping its tail."""
    return _cap_tail(output, LIMITS["output_max_bytes"])


def usage_text(cpu_s: float | None, max_rss_mb: float | None, of_job: bool = True) -> str:
    """An attempt's usage as the report scripts take it (lua/lib/attempt.lua):
    "" when not measured, else "<cpu_s> <max_rss_mb>", with " c" after when the
    peak is the child's since it started (`of_job` False)."""
    if cpu_s is None or max_rss_mb is None:
        return ""
    cpu_s = cpu_s if cpu_s > 0.0 else 0.0  # max(0.0, ...) without the calls: once a job
    max_rss_mb = max_rss_mb if max_rss_mb > 0.0 else 0.0
    text = f"{cpu_s:.4f} {max_rss_mb:.1f}"
    return text if of_job else text + " c"


def cap_message(message: str) -> str:
    """A failure message cut to the scripts' cap, keeping its tail."""
    return _cap_tail(message, LIMITS["message_max_bytes"])


def _cap_tail(text: str, cap: int) -> str:
    """`text` (lone surrogates as "?": it must go as UTF-8) cut to its last `cap`
    bytes after a marker saying how much was cut."""
    if not text:
        return text
    raw = text.encode("utf-8", "replace")
    if len(raw) <= cap:
        return text if len(raw) == len(text) else raw.decode("utf-8")
    marker = f"[... cut {len(raw) - cap} bytes ...]\n"
    return marker + raw[len(raw) - cap + len(marker.encode()) :].decode("utf-8", "ignore")


def item_error(item: Mapping[str, Any]) -> Error:
    cls = LUA_ERROR_CODES.get(item["error"], Error)
    return cls(item.get("message") or item["error"])


def outcomes(reply: list[dict[str, Any]]) -> dict[str, str | Error]:
    """{jid: state, or the error of that job} from a batch reply."""
    return {
        item["jid"]: item_error(item) if "error" in item else str(item["state"]) for item in reply
    }


def single(reply: list[dict[str, Any]]) -> str:
    """The state from a one-item batch reply, or its error raised."""
    item = reply[0]
    if "error" in item:
        raise item_error(item)
    return str(item["state"])


def raise_lost(lost: Iterable[str]) -> NoReturn:
    raise LeaseLost(f"lease lost on {', '.join(lost)}")


def check_domain(domain: Any) -> str:
    if (
        not isinstance(domain, str)
        or not domain
        or len(domain) > LIMITS["domain_max"]
        or any(c.isspace() for c in domain)
    ):
        raise BadArgument(f"domain must be 1-255 characters without blanks, got {domain!r}")
    return domain


def domain_limit(
    domain: str,
    rate: float | None,
    period: float,
    burst: int | None,
    concurrency: int | None = None,
) -> str:
    """A domain's limits as lua/domain_limit.lua takes them."""
    check_domain(domain)
    if rate is None and concurrency is None:
        raise BadArgument("give a rate, a concurrency or both")
    limit: dict[str, Any] = {}
    if rate is not None:
        rate_ = check_seconds("rate", rate)
        period_ = check_seconds("period", period)
        if rate_ <= 0 or period_ <= 0:
            raise BadArgument("rate and period must be above 0")
        limit.update(rate=rate_, period=period_, burst=check_int("burst", burst or 0, 0, 10**9))
    elif burst:
        raise BadArgument("burst goes with a rate")
    if concurrency is not None:
        limit["concurrency"] = check_int("concurrency", concurrency, 1, LIMITS["concurrency_max"])
    return dumps(limit)
