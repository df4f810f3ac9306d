"""The ACL a deployment needs (runtime.queue.acl, docs/redis.md "ACL"): the core of the
suite runs as a user with only those rights — a put, a real master popping and
completing, reads and failures — and one right less is a one-line error that
names the user."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path

import pytest

from runtime import Client
from runtime.cli import run
from runtime.errors import RedisUnavailable
from runtime.queue import acl
from runtime.queue.embedded import ServerProcess
from tests.integration.conftest import StartMaster
from tests.support.waiting import wait_for

J = "tests.integration.jobs"
PASSWORD = "acl-s3cret"
MakeUser = Callable[..., str]


def _major(server: ServerProcess) -> int:
    with Client.from_url(server.url) as admin:
        return int(str(admin.redis.info("server")["redis_version"]).split(".")[0])


@pytest.fixture
def make_user(default_server: ServerProcess, plain_client: Client) -> Iterator[MakeUser]:
    """make_user(rules=None, drop=(), add=()) -> the URL of a fresh user of the test
    server with `rules` (default: what acl.rules says this namespace needs), less
    `drop`, plus `add`. Every user is deleted afterwards."""
    made: list[str] = []
    functions = _major(default_server) >= 7
    socket = default_server.socket

    def make(
        rules: list[str] | None = None, drop: tuple[str, ...] = (), add: tuple[str, ...] = ()
    ) -> str:
        name = "u" + uuid.uuid4().hex[:8]
        wanted = rules if rules is not None else acl.rules(plain_client.keys.namespace, functions)
        wanted = [r for r in wanted if r not in drop] + list(add)
        plain_client.redis.acl_setuser(name, reset=True)  # then the rules, as written
        plain_client.redis.execute_command(  # type: ignore[no-untyped-call]
            "ACL", "SETUSER", name, "on", f">{PASSWORD}", *wanted
        )
        made.append(name)
        return f"unix://{name}:{PASSWORD}@{socket}"

    yield make
    for name in made:
        plain_client.redis.acl_deluser(name)


def test_the_rules_cover_every_command_the_operations_call() -> None:
    lua = resources.files("runtime.queue").joinpath("lua")
    called: set[str] = set()
    for path in [*Path(str(lua)).glob("*.lua"), *Path(str(lua)).glob("lib/*.lua")]:
        called |= {c.lower() for c in re.findall(r"redis\.p?call\(\s*'(\w+)'", path.read_text())}
    assert called, "no redis.call found: the pattern is stale"
    # INFO is optional: cancel.lua asks it through redis.pcall, and does without
    allowed = set(acl.IN_SCRIPTS) | set(acl.OPTIONAL)
    assert called <= allowed, sorted(called - allowed)


def test_the_rules_name_the_root_key_and_the_events_channel() -> None:
    rules = acl.rules("billing")
    assert "~{billing}*" in rules and "&{billing}:*" in rules
    assert rules.index("-@all") < rules.index("+fcall")
    assert "+evalsha" in acl.rules("billing", functions=False)
    assert "+fcall" not in acl.rules("billing", functions=False)


def test_a_user_with_only_the_documented_rights_runs_the_core_of_the_suite(
    make_user: MakeUser, plain_client: Client, start_master: StartMaster
) -> None:
    url = make_user()
    limited = Client.from_url(url, namespace=plain_client.keys.namespace)
    q = limited.queue("q")
    done = q.put(f"{J}:noop", {"n": 1})
    failing = q.put(f"{J}:fail", {"n": 2}, retries=0)
    limited.scheduling.track(done)
    master = start_master("q", url=url)
    wait_for(
        lambda: all(
            limited.get_job(j).state in ("complete", "failed")  # type: ignore[union-attr]
            for j in (done, failing)
        ),
        30,
        what="both jobs to end",
    )
    assert limited.get_job(done).state == "complete"  # type: ignore[union-attr]
    assert limited.get_job(failing).state == "failed"  # type: ignore[union-attr]
    assert limited.failed() == {"builtins.ValueError": 1}  # the one job that raised ValueError
    assert q.counts()["waiting"] == 0 and limited.queues() == ["q"]
    assert limited.admin.workers() and limited.admin.config_get()["heartbeat"] > 0
    assert "denies" not in master.log() and "NOPERM" not in master.log()


def test_a_user_without_function_rights_runs_everything_by_evalsha(
    make_user: MakeUser, plain_client: Client
) -> None:
    url = make_user(acl.rules(plain_client.keys.namespace, functions=False))
    limited = Client.from_url(url, namespace=plain_client.keys.namespace)
    jid = limited.queue("q").put(f"{J}:noop")
    [job] = limited.queue("q").pop(1)
    assert job.complete() == "complete" and limited.get_job(jid).state == "complete"  # type: ignore[union-attr]
    assert not limited.conn.session.functions


def test_a_user_without_info_cancels_and_gets_tombstones(
    make_user: MakeUser, plain_client: Client, default_server: ServerProcess
) -> None:
    """INFO is optional: a cancel asks it whether Redis has room for tombstones
    (lib/place.lua) and, refused, writes them."""
    ns = plain_client.keys.namespace
    url = make_user(acl.rules(ns, functions=_major(default_server) >= 7, optional=False))
    limited = Client.from_url(url, namespace=ns)
    jid = limited.queue("q").put(f"{J}:noop")
    assert limited.cancel(jid) == [jid]
    tomb = limited.get_job(jid)
    assert tomb is not None and tomb.state == "cancelled"


@pytest.mark.parametrize(
    ("drop", "add", "says"),
    [
        # only {ns}:*: every operation names the bare root {ns} as its KEYS[1]
        (("~{NS}*",), ("~{NS}:*",), "no permissions to access one of the keys"),
        (("+time",), (), "can't run this command"),  # called inside the scripts
        (("+zrange",), (), "'zrange'"),  # sent by the client (runtime status lists queues)
    ],
)
def test_one_right_less_is_a_one_line_error_naming_the_user(
    make_user: MakeUser,
    plain_client: Client,
    capsys: pytest.CaptureFixture[str],
    drop: tuple[str, ...],
    add: tuple[str, ...],
    says: str,
) -> None:
    ns = plain_client.keys.namespace
    url = make_user(
        drop=tuple(r.replace("NS", ns) for r in drop), add=tuple(r.replace("NS", ns) for r in add)
    )
    user = url.split("//", 1)[1].split(":", 1)[0]
    limited = Client.from_url(url, namespace=ns)

    def core() -> None:  # the listing first: a put's script calls ZRANGE too (promotion)
        limited.queues()
        limited.queue("q").put(f"{J}:noop")

    with pytest.raises(RedisUnavailable) as refused:
        core()
    assert f"denies user {user!r} a right runtime needs (ACL)" in str(refused.value)
    assert says in str(refused.value) and PASSWORD not in str(refused.value)
    assert run(["--url", url, "--namespace", ns, "status"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "denies user" in err and PASSWORD not in err
