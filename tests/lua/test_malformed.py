"""A table of malformed arguments for every script: each gets its typed error
and nothing at all is written."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from runtime import BadArgument, Client, JobExists, NoSuchJob, WrongState
from runtime.errors import Error
from runtime.queue import scripts
from tests.conftest import snapshot
from tests.support.clock import FrozenClock


def spec(**overrides: object) -> str:
    base: dict[str, object] = {"jid": "new", "klass": "a.b:c", "queue": "q"}
    base.update(overrides)
    return json.dumps({k: v for k, v in base.items() if v is not ...})


OK_DATA = "{}"

CASES: list[tuple[str, tuple[object, ...], type[Error], str]] = [
    # put
    ("put", (), BadArgument, "pairs"),
    ("put", (spec(),), BadArgument, "pairs"),
    ("put", ("not json", OK_DATA), BadArgument, "not a JSON object"),
    ("put", (spec(traceparent="00-zz-01-01"), OK_DATA), BadArgument, "traceparent"),
    ("put", (spec(traceparent=5), OK_DATA), BadArgument, "traceparent"),
    ("put", (spec(jid=...), OK_DATA), BadArgument, "jid"),
    ("put", (spec(jid="has space"), OK_DATA), BadArgument, "jid"),
    ("put", (spec(jid="x" * 129), OK_DATA), BadArgument, "jid"),
    ("put", (spec(klass="nodots"), OK_DATA), BadArgument, "klass"),
    ("put", (spec(klass="a..b:c"), OK_DATA), BadArgument, "klass"),
    ("put", (spec(klass="1a.b:c"), OK_DATA), BadArgument, "klass"),
    ("put", (spec(klass="a.b:"), OK_DATA), BadArgument, "klass"),
    ("put", (spec(klass=":c"), OK_DATA), BadArgument, "klass"),
    ("put", (spec(klass="a b:c"), OK_DATA), BadArgument, "klass"),
    ("put", (spec(klass=5), OK_DATA), BadArgument, "klass"),
    ("put", (spec(queue="a{b"), OK_DATA), BadArgument, "queue"),
    ("put", (spec(queue="a}b"), OK_DATA), BadArgument, "queue"),
    ("put", (spec(queue="a:b"), OK_DATA), BadArgument, "queue"),
    ("put", (spec(queue="a b"), OK_DATA), BadArgument, "queue"),
    ("put", (spec(queue=""), OK_DATA), BadArgument, "queue"),
    ("put", (spec(queue="q" * 129), OK_DATA), BadArgument, "queue"),
    ("put", (spec(priority=2**31), OK_DATA), BadArgument, "priority"),
    ("put", (spec(priority=1.5), OK_DATA), BadArgument, "priority"),
    ("put", (spec(priority="high"), OK_DATA), BadArgument, "priority"),
    ("put", (spec(retries=-1), OK_DATA), BadArgument, "retries"),
    ("put", (spec(retries=10_001), OK_DATA), BadArgument, "retries"),
    ("put", (spec(delay_ms=-1), OK_DATA), BadArgument, "delay_ms"),
    ("put", (spec(delay_ms="NaN"), OK_DATA), BadArgument, "delay_ms"),
    ("put", (spec(delay_ms=1, at_ms=1), OK_DATA), BadArgument, "not both"),
    ("put", (spec(at_ms=-5), OK_DATA), BadArgument, "at_ms"),
    ("put", (spec(tags="t"), OK_DATA), BadArgument, "tags"),
    ("put", (spec(tags=["a b"]), OK_DATA), BadArgument, "tags"),
    ("put", (spec(tags=[str(i) for i in range(65)]), OK_DATA), BadArgument, "tags"),
    ("put", (spec(depends=["unknown"]), OK_DATA), BadArgument, "unknown dependency"),
    ("put", (spec(depends=["new"]), OK_DATA), BadArgument, "itself"),
    ("put", (spec(domain="a b"), OK_DATA), BadArgument, "domain"),
    ("put", (spec(domain=""), OK_DATA), BadArgument, "domain"),
    ("put", (spec(unique_key="x" * 200), OK_DATA), BadArgument, "unique_key"),
    ("put", (spec(backoff=[5]), OK_DATA), BadArgument, "backoff"),
    ("put", (spec(backoff=[5, 1]), OK_DATA), BadArgument, "backoff max"),
    ("put", (spec(timeout_s=0), OK_DATA), BadArgument, "timeout_s"),
    ("put", (spec(unique_key="k", unique_for=-1), OK_DATA), BadArgument, "unique_for"),
    ("message_status", ("",), BadArgument, "jid"),
    ("depends", ("old", "sideways", "x"), BadArgument, "on"),
    ("tag", ("old", "paint", "x"), BadArgument, "add"),
    ("tag", ("old", "add", "a b"), BadArgument, "tag"),
    ("tag", ("missing", "add", "x"), NoSuchJob, "missing"),
    ("tag", ("old", "add", *[f"t{i}" for i in range(65)]), BadArgument, "at most"),
    ("track", ("old", "maybe"), BadArgument, "on"),
    ("recur", ("not json", "{}"), BadArgument, "definition"),
    (
        "recur",
        (json.dumps({"id": "r", "queue": "q", "spec": {"klass": "a.b:c"}}), "{}"),
        BadArgument,
        "every or cron",
    ),
    (
        "recur",
        (json.dumps({"id": "r", "queue": "q", "spec": {"klass": "bad"}, "every": 5}), "{}"),
        BadArgument,
        "klass",
    ),
    (
        "recur",
        (json.dumps({"id": "r", "queue": "q", "spec": {"klass": "a.b:c"}, "every": 0}), "{}"),
        BadArgument,
        "every",
    ),
    (
        "recur",
        (
            json.dumps(
                {"id": "r", "queue": "q", "spec": {"klass": "a.b:c"}, "every": 5, "policy": "often"}
            ),
            "{}",
        ),
        BadArgument,
        "policy",
    ),
    (
        "recur",
        (
            json.dumps(
                {"id": "r", "queue": "q", "spec": {"klass": "a.b:c", "jid": "x"}, "every": 5}
            ),
            "{}",
        ),
        BadArgument,
        "cannot set jid",
    ),
    (
        "recur",
        (
            json.dumps({"id": "r", "queue": "q", "spec": {"klass": "a.b:c"}, "cron": "* * * * *"}),
            "{}",
        ),
        BadArgument,
        "ticks",
    ),
    (
        "recur",
        (
            json.dumps({"id": "r", "queue": "q", "spec": {"klass": "a.b:c"}, "cron": "* * * * *"}),
            "{}",
            "2000",
            "1000",
        ),
        BadArgument,
        "ascending",
    ),
    (
        "recur",
        (json.dumps({"id": "r", "queue": "q:x", "spec": {"klass": "a.b:c"}, "every": 5}), "{}"),
        BadArgument,
        "queue",
    ),
    ("unrecur", ("",), BadArgument, "id"),
    ("requeue", ("old", ""), WrongState, "waiting"),
    ("requeue", ("missing", ""), NoSuchJob, "missing"),
    ("requeue", ("old", "a b"), BadArgument, "queue"),
    ("recur_ticks", ("",), BadArgument, "id"),
    ("track", ("missing", "on"), NoSuchJob, "missing"),
    ("depends", ("old", "on", "unknown"), BadArgument, "unknown dependency"),
    ("depends", ("old", "on", "old"), BadArgument, "itself"),
    ("depends", ("missing", "on", "old"), NoSuchJob, "missing"),
    (
        "put",
        (spec(jid="a", depends=["b"]), OK_DATA, spec(jid="b", depends=["a"]), OK_DATA),
        BadArgument,
        "cycle",
    ),
    ("put", (spec(), "[1]"), BadArgument, "JSON object"),
    ("put", (spec(), ""), BadArgument, "JSON object"),
    ("put", (spec(), '{"big":"' + "x" * 2000 + '"}'), BadArgument, "max-data-bytes"),
    ("put", (spec(), "{not json}"), BadArgument, "data must be a JSON object"),
    ("put", (spec(), '{"a":1}{"b":2}'), BadArgument, "data must be a JSON object"),
    ("put", (spec(jid="old"), OK_DATA), JobExists, "old"),
    ("put", (spec(jid="twice"), OK_DATA, spec(jid="twice"), OK_DATA), JobExists, "twice"),
    (
        "put",
        (spec(jid="fine"), OK_DATA, spec(jid="bad", queue="a:b"), OK_DATA),
        BadArgument,
        "queue",
    ),
    # pop
    ("pop", ("", 1, "seed", "ordered", 0, 0, "q"), BadArgument, "worker"),
    ("pop", ("w", -1, "seed", "ordered", 0, 0, "q"), BadArgument, "count"),
    ("pop", ("w", 1001, "seed", "ordered", 0, 0, "q"), BadArgument, "count"),
    ("pop", ("w", "many", "seed", "ordered", 0, 0, "q"), BadArgument, "count"),
    ("pop", ("w", 1, "", "ordered", 0, 0, "q"), BadArgument, "seed"),
    ("pop", ("w", 1, "seed", "random", 0, 0, "q"), BadArgument, "order"),
    ("pop", ("w", 1, "seed", "ordered", 0, 0, "q:x"), BadArgument, "queue"),
    ("pop", ("w", 1, "seed", "ordered", -1, 0, "q"), BadArgument, "ahead_us"),
    ("pop", ("w", 1, "seed", "ordered", 100_001, 0, "q"), BadArgument, "ahead_us"),
    ("pop", ("w", 1, "seed", "ordered", "soon", 0, "q"), BadArgument, "ahead_us"),
    ("pop", ("w", 1, "seed", "ordered", 0, -1, "q"), BadArgument, "idle"),
    ("pop", ("w", 1, "seed", "ordered", 0, 60_001, "q"), BadArgument, "idle"),
    ("pop", ("w", 1, "seed", "ordered", 0, 1.5, "q"), BadArgument, "idle"),
    ("pop", ("w", 1, "seed", "ordered", 0, "fast", "q"), BadArgument, "idle"),
    # heartbeat
    ("heartbeat", ("w", "old"), BadArgument, "pairs"),
    ("heartbeat", ("", "old", "t"), BadArgument, "worker"),
    # complete, fail, retry
    ("complete", ("w", "old"), BadArgument, "groups of jid"),
    ("complete", ("w", "old", "t", "{}"), BadArgument, "groups of jid"),
    ("complete", ("w", "old", "t", "{}", "", ""), BadArgument, "groups of jid"),
    ("complete", ("w" * 201, "old", "t", "{}", "", "", ""), BadArgument, "worker"),
    ("fail", ("w", "old", "t"), BadArgument, "groups"),
    ("fail", ("w", "old", "t", "g", "m", ""), BadArgument, "groups"),
    ("retry", ("w", "old", "t", "g", "m"), BadArgument, "groups"),
    ("retry", ("w", "old", "t", "g", "m", "0", ""), BadArgument, "groups"),
    # exchange: the pop's arguments, then how many jobs each report carries
    (
        "exchange",
        ("w", 1, "seed", "ordered", 0, 0, 1, 0, 0, "old", "t"),
        BadArgument,
        "fewer arguments",
    ),
    (
        "exchange",
        ("w", 1, "seed", "ordered", 0, 0, 0, 1, 0, "old", "t", "g", "m", "0", ""),
        BadArgument,
        "fewer arguments",
    ),
    (
        "exchange",
        ("w", 1, "seed", "ordered", 0, 0, 0, 0, 1, "old", "t", "g", "m", ""),
        BadArgument,
        "fewer arguments",
    ),
    ("exchange", ("w", 1, "seed", "ordered", 0, 0, -1, 0, 0, "q"), BadArgument, "completes"),
    ("exchange", ("w", 1, "seed", "ordered", 0, 0, 0, "some", 0, "q"), BadArgument, "retries"),
    ("exchange", ("w", 1, "seed", "ordered", 0, 0, 0, 0), BadArgument, "fails"),
    (
        "exchange",
        ("", 1, "seed", "ordered", 0, 0, 1, 0, 0, "old", "t", "{}", "", "", "", "q"),
        BadArgument,
        "worker",
    ),
    (
        "exchange",
        ("w", 1, "seed", "random", 0, 0, 1, 0, 0, "old", "t", "{}", "", "", "", "q"),
        BadArgument,
        "order",
    ),
    (
        "exchange",
        ("w", 1, "seed", "ordered", 0, 0, 1, 0, 0, "old", "t", "{}", "", "", "", "q:x"),
        BadArgument,
        "queue",
    ),
    ("exchange", ("w", 1001, "seed", "ordered", 0, 0, 0, 0, 0, "q"), BadArgument, "count"),
    # cancel, priority, get, counts, peek, pause, failed, unfail
    ("cancel", ("api", *(f"j{i}" for i in range(10_001))), BadArgument, "at most"),
    ("cancel", ("nobody", "old"), BadArgument, "by must be one of"),
    ("cancel", ("", "old"), BadArgument, "by must be one of"),
    ("cancel", (), BadArgument, "by must be one of"),
    ("priority", ("old", "1.5"), BadArgument, "priority"),
    ("priority", ("old", "x"), BadArgument, "priority"),
    ("priority", ("missing", "1"), NoSuchJob, "missing"),
    ("get", tuple(f"j{i}" for i in range(1001)), BadArgument, "at most"),
    ("counts", ("a b",), BadArgument, "queue"),
    # throughput
    ("throughput", (), BadArgument, "minutes"),
    ("throughput", ("0",), BadArgument, "minutes"),
    ("throughput", ("1441",), BadArgument, "minutes"),
    ("throughput", ("1.5",), BadArgument, "minutes"),
    ("peek", ("q", 0), BadArgument, "count"),
    ("peek", ("q", 1001), BadArgument, "count"),
    ("peek", ("q{", 1), BadArgument, "queue"),
    ("set_paused", ("q", "yes"), BadArgument, "paused"),
    ("release", ("w", "old"), BadArgument, "triples"),
    ("release", ("w", "j", "t", "2"), BadArgument, "started"),
    ("forget_worker", ("",), BadArgument, "worker"),
    ("forget_worker", ("w", "a:b"), BadArgument, "queue"),
    ("set_paused", ("", "1"), BadArgument, "queue"),
    ("failed", ("g", -1, 5), BadArgument, "start"),
    ("failed", ("g", 0, 5000), BadArgument, "count"),
    ("unfail", ("g", "q", 0), BadArgument, "count"),
    ("unfail", ("g", "q x", 1), BadArgument, "queue"),
    ("unfail", ("", "q", 1), BadArgument, "group"),
    # progress, wait (issue 12)
    ("progress", ("w", "old", "t", "1", ""), BadArgument, "groups"),
    ("live", ("w", "old", "t", "text"), BadArgument, "groups"),
    ("live", ("", "old", "t", "text", "0"), BadArgument, "worker"),
    ("progress", ("", "old", "t", "1", "", ""), BadArgument, "worker"),
    ("wait", ("", 0), BadArgument, "jid"),
    ("wait", ("old",), BadArgument, "for_ms"),
    ("wait", ("old", -1), BadArgument, "for_ms"),
    ("wait", ("old", 3600 * 1000 + 1), BadArgument, "for_ms"),
    ("wait", ("old", "soon"), BadArgument, "for_ms"),
    ("wait", ("missing", 0), NoSuchJob, "missing"),
    ("wait", ("missing", 1000), NoSuchJob, "missing"),
    ("put", (spec(by="a b"), OK_DATA), BadArgument, "by"),
    ("put", (spec(expires_in_ms=0), OK_DATA), BadArgument, "expires_in_ms"),
    ("put", (spec(expires_in_ms=1.5), OK_DATA), BadArgument, "expires_in_ms"),
    ("put", (spec(debounce_ms=1000), OK_DATA), BadArgument, "debounce needs a unique_key"),
    ("put", (spec(debounce_ms=0, unique_key="k"), OK_DATA), BadArgument, "debounce_ms"),
    ("put", (spec(debounce_ms=5, unique_key="k", delay_ms=1), OK_DATA), BadArgument, "debounce"),
    (
        "put",
        (spec(debounce_ms=5, unique_key="k", requeue_if_running=True), OK_DATA),
        BadArgument,
        "debounce",
    ),
    ("put", (spec(by=5), OK_DATA), BadArgument, "by"),
    # resumed
    ("resumed", (), BadArgument, "worker"),
    ("resumed", ("", 5), BadArgument, "worker"),
    ("resumed", ("w",), BadArgument, "outage_ms"),
    ("resumed", ("w", 0), BadArgument, "outage_ms"),
    ("resumed", ("w", -5), BadArgument, "outage_ms"),
    ("resumed", ("w", 1.5), BadArgument, "outage_ms"),
    ("resumed", ("w", "long"), BadArgument, "outage_ms"),
    ("resumed", ("w", 7 * 86400 * 1000 + 1), BadArgument, "outage_ms"),
    # domain_limit
    ("domain_limit", ("a b", ""), BadArgument, "domain"),
    ("domain_limit", ("x.com",), BadArgument, "limit"),
    ("domain_limit", ("x.com", "not json"), BadArgument, "limit"),
    ("domain_limit", ("x.com", '{"rate":0,"period":1}'), BadArgument, "above 0"),
    ("domain_limit", ("x.com", '{"rate":1,"period":"a"}'), BadArgument, "period"),
    ("domain_limit", ("x.com", '{"rate":1,"period":1,"burst":-1}'), BadArgument, "burst"),
    ("domain_limit", ("x.com", "{}"), BadArgument, "a rate or a concurrency"),
    ("domain_limit", ("x.com", '{"burst":2}'), BadArgument, "a rate or a concurrency"),
    ("domain_limit", ("x.com", '{"concurrency":0}'), BadArgument, "concurrency"),
    ("domain_limit", ("x.com", '{"concurrency":1.5}'), BadArgument, "concurrency"),
    ("domain_limit", ("x.com", '{"concurrency":1000001}'), BadArgument, "concurrency"),
    ("domain_limit", ("x.com", '{"rate":1,"concurrency":2}'), BadArgument, "period"),
    # domain_pause
    ("domain_pause", (), BadArgument, "domain"),
    ("domain_pause", ("a b", "1"), BadArgument, "domain"),
    ("domain_pause", ("x.com",), BadArgument, "paused"),
    ("domain_pause", ("x.com", "yes"), BadArgument, "paused"),
    # jobs, queue_forget, worker_info, metrics (issue 13)
    ("jobs", ("q", "stalled", 0, 5, "newest"), BadArgument, "state"),
    ("jobs", ("q", "waiting", -1, 5, "newest"), BadArgument, "start"),
    ("jobs", ("q", "waiting", 0, 1001, "newest"), BadArgument, "count"),
    ("jobs", ("q", "waiting", 0, 5, "sideways"), BadArgument, "order"),
    ("jobs", ("a:b", "waiting", 0, 5, "newest"), BadArgument, "queue"),
    ("queue_forget", ("",), BadArgument, "queue"),
    ("retention", (), BadArgument, "batch"),
    ("retention", (0,), BadArgument, "batch"),
    ("retention", ("many",), BadArgument, "batch"),
    ("queue_forget", ("q",), WrongState, "not empty (1 waiting)"),
    ("worker_info", ("w", "not json"), BadArgument, "info"),
    ("worker_info", ("w", '{"host":"h","pid":1,"queues":["q"]}'), BadArgument, "concurrency"),
    ("worker_info", ("", '{"host":"h","pid":1,"concurrency":1}'), BadArgument, "worker"),
    ("worker_info", ("w", '{"host":"h","pid":1,"concurrency":1,"queues":[5]}'), BadArgument, "q"),
    ("metrics", ("soon",), BadArgument, "up_ms"),
    ("metrics", (-1,), BadArgument, "up_ms"),
    ("batch_open", ("b1", ""), BadArgument, "two callbacks"),
    ("batch_open", ("a b", "", "", "", "", ""), BadArgument, "bid"),
    ("batch_open", ("b1", "x" * 1025, "", "", "", ""), BadArgument, "description"),
    ("batch_open", ("b1", "", "not json", "{}", "", ""), BadArgument, "on_success spec"),
    ("batch_open", ("b1", "", spec(), "[]", "", ""), BadArgument, "data"),
    ("batch_open", ("b1", "", spec(klass="bad"), "{}", "", ""), BadArgument, "klass"),
    ("batch_open", ("b1", "", "", "", spec(depends=["old"]), "{}"), BadArgument, "depends"),
    ("batch_open", ("b1", "", "", "", spec(batch="b0"), "{}"), BadArgument, "batch"),
    ("batch_open", ("b1", "", spec(), '{"total":1}', "", ""), BadArgument, "total"),
    ("batch_close", ("",), BadArgument, "bid"),
    ("batch_close", ("nope",), NoSuchJob, "nope"),
    ("batch_get", ("b1", -1), BadArgument, "failed_max"),
    ("batch_get", ("a b", 1), BadArgument, "bid"),
    ("batch_retry", ("nope", 1), NoSuchJob, "nope"),
    ("batch_retry", ("b1", 0), BadArgument, "count"),
    ("batch_retry", ("b1", "many"), BadArgument, "count"),
    ("put", (spec(batch="a b"), OK_DATA), BadArgument, "batch"),
    (
        "recur",
        (
            json.dumps(
                {"id": "r", "queue": "q", "spec": {"klass": "a.b:c", "batch": "b"}, "every": 5}
            ),
            "{}",
        ),
        BadArgument,
        "cannot set batch",
    ),
    ("put", (spec(batch="nope"), OK_DATA), BadArgument, "no batch"),
    ("domains", (0,), BadArgument, "count"),
    ("domains", (1001,), BadArgument, "count"),
]


def test_every_script_has_malformed_cases() -> None:
    covered = {case[0] for case in CASES} | {"workers", "now"}  # they take no arguments
    assert covered == set(scripts.operations())


def _cases() -> list[Any]:
    """CASES as parameters. Each operation's first case runs on every Redis version
    in the default run (its script loads and refuses there too), the others on
    the second version under slow only (tests/conftest.py)."""
    params, seen = [], set()
    for i, case in enumerate(CASES):
        marks = () if case[0] in seen else (pytest.mark.every_version,)
        seen.add(case[0])
        params.append(pytest.param(*case, id=f"{case[0]}-{i}", marks=marks))
    return params


@pytest.mark.parametrize(("op", "args", "error", "fragment"), _cases())
def test_malformed_arguments_raise_a_typed_error_and_write_nothing(
    client: Client,
    clock: FrozenClock,
    op: str,
    args: tuple[object, ...],
    error: type[Error],
    fragment: str,
) -> None:
    client.admin.config_set("max-data-bytes", 1000)
    client.queue("q").put("a.b:c", {}, jid="old")
    before = snapshot(client)
    with pytest.raises(error) as caught:
        client.conn.run(op, *args)
    assert fragment in str(caught.value)
    assert "\n" not in str(caught.value)
    assert snapshot(client) == before


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"delay": math.nan}, "finite"),
        ({"delay": -1}, "finite"),
        ({"delay": math.inf}, "finite"),
        ({"priority": 2**40}, "priority"),
        ({"priority": True}, "priority"),
        ({"retries": -2}, "retries"),
        ({"tags": "single"}, "lists"),
        ({"at": 5, "delay": 5}, "not both"),
        ({"expires_in": 0}, "expires_in must be above 0"),
        ({"expires_in": -1}, "expires_in"),
        ({"expires_in": "soon"}, "expires_in"),
        ({"debounce": 1}, "debounce needs a unique_key"),
        ({"debounce": 0, "unique_key": "k"}, "debounce must be above 0"),
        ({"debounce": 1, "unique_key": "k", "delay": 2}, "without delay"),
        ({"debounce": 1, "unique_key": "k", "requeue_if_running": True}, "without delay"),
    ],
)
def test_the_client_checks_arguments_before_sending(
    client: Client, kwargs: dict[str, object], fragment: str
) -> None:
    before = snapshot(client)
    with pytest.raises(BadArgument) as caught:
        client.queue("q").put("a.b:c", {}, **kwargs)  # type: ignore[arg-type]
    assert fragment in str(caught.value)
    assert snapshot(client) == before


@pytest.mark.parametrize("data", [[1, 2], "text", {"bad": {1, 2}}, {"nan": math.nan}])
def test_data_that_is_not_a_json_object_is_refused(client: Client, data: object) -> None:
    with pytest.raises(BadArgument):
        client.queue("q").put("a.b:c", data)  # type: ignore[arg-type]


def test_bad_queue_names_are_refused_by_the_client(client: Client) -> None:
    for name in ("", "a:b", "a b", "{x}", "x" * 129):
        with pytest.raises(BadArgument):
            client.queue(name)
