"""How the operations reach Redis: a function library (FCALL) on Redis 7, one script
per operation (EVALSHA) on 6.2 or for users without FUNCTION rights; state a call
keeps never outlives it; a server that lost them gets them again."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime

import pytest

from runtime.queue import scripts
from runtime.queue.aio import MasterClient
from runtime.queue.api.client import Client
from runtime.queue.leases import Outcomes
from tests.support.clock import FrozenClock
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.every_version  # FCALL on 7, EVALSHA on 6.2: each version's own path


def _major(client: Client) -> int:
    return int(str(client.redis.info("server")["redis_version"]).split(".")[0])


def _calls(client: Client) -> dict[str, int]:
    stats = client.redis.info("commandstats")
    return {
        name: int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("fcall", "evalsha")
    }


def test_operations_run_as_functions_on_redis_7_and_as_scripts_before(client: Client) -> None:
    client.redis.config_resetstat()
    q = client.queue("modes")
    q.put("app.jobs:run", {"n": 1})
    [job] = q.pop(1)
    job.complete()
    calls = _calls(client)
    if _major(client) >= 7:
        assert calls["fcall"] >= 3 and calls["evalsha"] == 0, calls
        assert (
            scripts.library_name().encode()
            in json.dumps([str(x) for x in client.redis.function_list()]).encode()
        )
    else:
        assert calls["evalsha"] >= 3 and calls["fcall"] == 0, calls


def test_state_kept_for_one_call_does_not_leak_into_the_next(client: Client) -> None:
    clock = FrozenClock(client.redis, client.keys)
    q = client.queue("leaks")
    for i in range(4):
        q.put("app.jobs:run", {"n": i}, domain="limited.example" if i >= 2 else None)

    client.admin.config_set("leaks-heartbeat", 10)  # read by Config.get, memoized per call
    [first] = q.pop(1)
    client.admin.config_set("leaks-heartbeat", 20)
    [second] = q.pop(1)
    leases = [client.get_job(j.jid).lease_expires_ms for j in (first, second)]  # type: ignore[union-attr]
    assert leases == [clock.now_ms + 10_000, clock.now_ms + 20_000]

    client.set_domain_limit("limited.example", rate=1, period=3600)  # memoized per call
    assert [j.job.data["n"] for j in q.pop(2)] == [2]
    client.scheduling.clear_domain_limit("limited.example")
    assert [j.job.data["n"] for j in q.pop(2)] == [3]

    day = datetime.fromtimestamp(clock.now_ms / 1000, UTC).date()
    waits = client.admin.stats("leaks", day).wait  # Stats collects per call, flushes at its end
    assert waits.count == 4


def test_a_server_that_lost_the_library_and_scripts_gets_them_again(client: Client) -> None:
    q = client.queue("lost")
    q.put("app.jobs:run", {"n": 1})
    if _major(client) >= 7:
        client.redis.function_flush()
    client.redis.script_flush()
    q.put("app.jobs:run", {"n": 2})
    assert [j.job.data["n"] for j in q.pop(2)] == [1, 2]


def test_a_master_s_pipeline_reloads_what_the_server_lost(redis_server: RedisServer) -> None:
    namespace = "t" + uuid.uuid4().hex[:12]
    client = Client.from_url(redis_server.url, namespace=namespace)
    client.queue("lost").put("app.jobs:run", {"n": 1})

    async def exchange() -> list[str]:
        aio = MasterClient(redis_server.url, client.keys, "host-1")
        try:
            await aio.load_scripts()
            if _major(client) >= 7:
                await aio.redis.function_flush()
            await aio.redis.script_flush()
            popped = (await aio.exchange(Outcomes(), 1, ["lost"], "ordered")).popped
            assert popped is not None
            return [job.jid for job in popped.jobs]
        finally:
            await aio.close()

    assert len(asyncio.run(exchange())) == 1
    client.close()


def test_a_user_without_function_rights_runs_the_operations_by_evalsha(
    redis_server: RedisServer, client: Client
) -> None:
    if _major(client) < 7:
        pytest.skip("Redis 6.2 has no functions: every user runs scripts")
    user = "nofn" + uuid.uuid4().hex[:6]
    client.redis.acl_setuser(
        user,
        enabled=True,
        passwords=["+secret"],
        keys=["*"],
        channels=["*"],
        commands=["+@all", "-function", "-fcall", "-fcall_ro"],
    )
    try:
        socket = redis_server.url.removeprefix("unix://")
        limited = Client.from_url(f"unix://{user}@{socket}?password=secret", namespace="tacl")
        client.redis.config_resetstat()
        q = limited.queue("acl")
        jid = q.put("app.jobs:run", {"n": 1})
        [job] = q.pop(1)
        job.complete()
        assert limited.get_job(jid).state == "complete"  # type: ignore[union-attr]
        calls = _calls(client)
        assert calls["evalsha"] >= 3 and calls["fcall"] == 0, calls
        limited.close()
    finally:
        client.redis.acl_deluser(user)
