"""Data depth: one rule for Python and Lua (LIMITS["data_depth_max"] levels of
objects and arrays, the data object itself being the first). The scripts
check it at put whatever the client; data a script would refuse, or Python
could not read back, never gets stored; cjson's own settings, global to the
server's Lua, are left as they were."""

from __future__ import annotations

import json
import uuid

import pytest

from runtime import BadArgument, Client
from runtime.config import LIMITS
from tests.conftest import record, snapshot
from tests.support.clock import FrozenClock

# cjson's settings in the Lua of 6.2's scripts and of 7's
# functions: both in the default run
pytestmark = pytest.mark.every_version

DEPTH_MAX = LIMITS["data_depth_max"]
REFUSED = f"data is nested deeper than {DEPTH_MAX} levels (data_depth_max)"


def nested(levels: int) -> dict[str, object]:
    """Data `levels` deep: objects and lists in turn."""
    data: dict[str, object] = {}
    for i in range(levels - 1):
        data = {"a": data} if i % 2 else {"b": [data]}
    return data


def raw_put(client: Client, data: str | bytes, jid: str = "j1") -> object:
    spec = json.dumps({"jid": jid, "klass": "a.b:c", "queue": "q"})
    return client.conn.run_json("put", spec, data)


@pytest.mark.parametrize("levels", [1, 2, DEPTH_MAX])
def test_data_at_the_depth_limit_is_stored_and_popped_as_given(
    client: Client, clock: FrozenClock, levels: int
) -> None:
    text = '{"a":' * (levels - 1) + "{}" + "}" * (levels - 1)
    assert raw_put(client, text) == ["j1"]
    assert record(client, "j1")[1] == text  # type: ignore[index]
    [job] = client.queue("q").pop(1, worker="w")
    assert json.dumps(job.job.data, separators=(",", ":")) == text


@pytest.mark.parametrize("levels", [DEPTH_MAX + 1, 1000, 1001, 5000])
def test_deeper_data_sent_by_any_client_is_refused_with_the_rule(
    client: Client, clock: FrozenClock, levels: int
) -> None:
    before = snapshot(client)
    for text in (
        '{"a":' * (levels - 1) + "{}" + "}" * (levels - 1),
        '{"a":' + "[" * (levels - 1) + "]" * (levels - 1) + "}",
    ):
        with pytest.raises(BadArgument) as caught:
            raw_put(client, text)
        assert (
            str(caught.value) == f"data is nested deeper than {DEPTH_MAX} levels (data_depth_max)"
        )
    assert snapshot(client) == before


def test_the_python_client_applies_the_same_rule_before_sending(
    client: Client, clock: FrozenClock
) -> None:
    q = client.queue("q")
    deepest: dict[str, object] = {"a": {}}
    for _ in range(DEPTH_MAX - 2):
        deepest = {"a": deepest}
    assert q.put("a.b:c", deepest, jid="ok") == "ok"
    before = snapshot(client)
    with pytest.raises(BadArgument, match=f"nested deeper than {DEPTH_MAX} levels"):
        q.put("a.b:c", {"x": deepest}, jid="deep")
    with pytest.raises(BadArgument, match=f"nested deeper than {DEPTH_MAX} levels"):
        q.put("a.b:c", nested(100_000), jid="very-deep")
    with pytest.raises(BadArgument, match="lone surrogate"):
        q.put("a.b:c", {"text": "\ud800"}, jid="surrogate")
    assert snapshot(client) == before


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b'{"n":0x10}', "not valid JSON"),
        (b'{"n":nan}', "not valid JSON"),
        (b'{"n":inf}', "not valid JSON"),
        (b'{"t":"\xff"}', "not valid UTF-8"),
        (b'{"t":"\xed\xa0\x80"}', "not valid UTF-8"),  # a surrogate, encoded
        (b'{"t":"\\ud800"}', "not valid JSON"),  # a lone surrogate, escaped
    ],
)
def test_data_python_could_not_read_back_is_refused_at_put(
    client: Client, clock: FrozenClock, data: bytes, problem: str
) -> None:
    before = snapshot(client)
    with pytest.raises(BadArgument) as caught:
        raw_put(client, data)
    assert f"data must be a JSON object ({problem})" in str(caught.value)
    assert "\n" not in str(caught.value)
    assert snapshot(client) == before


def test_utf8_text_of_every_length_is_stored(client: Client, clock: FrozenClock) -> None:
    data = {"t": "a é € 𝄞 \u07ff \uffff \U0010ffff"}
    client.queue("q").put("a.b:c", data, jid="j1")
    [job] = client.queue("q").pop(1, worker="w")
    assert job.job.data == data


def test_cjson_settings_are_left_as_they_were(client: Client, clock: FrozenClock) -> None:
    """The scripts tighten cjson (depth, invalid numbers) around their own
    decoding; other scripts on the server, and ours afterwards, see the defaults."""
    with pytest.raises(BadArgument):
        raw_put(client, '{"a":' * 200 + "1" + "}" * 200)
    client.queue("q").put("a.b:c", {"n": 1}, jid="fine")
    client.get_job("fine")
    [job] = client.queue("q").pop(1, worker="w")  # strict decodes, then the at_end writes
    assert job.token is not None
    client.leases.complete_many("w", {job.jid: job.token})
    probe = "return {cjson.decode_max_depth(), tostring(cjson.decode_invalid_numbers())}"
    assert client.redis.eval(probe, 0) == [1000, b"true"]
    major = int(str(client.redis.info("server")["redis_version"]).split(".")[0])
    if major >= 7:  # functions run in a Lua of their own
        name = "probe_" + uuid.uuid4().hex[:8]
        client.redis.function_load(
            f"#!lua name={name}\nredis.register_function('{name}', function() {probe} end)"
        )
        try:
            assert client.redis.fcall(name, 0) == [1000, b"true"]
        finally:
            client.redis.function_delete(name)
