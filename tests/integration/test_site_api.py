"""One site, one API (issue 29, part 2): a sharded site of two namespaces — on
one Redis, and on two Redis servers named by URL in the rule — used exactly as
one namespace: the plain Client (by `shards=` and by RUNTIME_SHARDS), typed
puts, the AsyncClient, every CLI verb and a worker see and act on the jobs of
both namespaces."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from runtime import AsyncClient, Client, JobFailed, NoSuchJob
from runtime import cli as runtime_cli
from runtime.errors import ConfigError, CrossShard
from runtime.queue.api.client import Site
from runtime.queue.embedded import ServerProcess
from runtime.typed import set_default_client
from runtime.vocabulary import JobState
from tests.integration import typed_jobs
from tests.support import redis_faults
from tests.support.master import MasterProcess

J = "tests.integration.jobs:noop"
W = "host-1"


@dataclass
class Topology:
    url: str  # the site's URL (the first namespace's server)
    rule: str
    a: str  # serves queue qa
    b: str  # serves every other queue (typed jobs' "typed" too)
    urls: dict[str, str]  # each namespace's server
    servers: dict[str, ServerProcess]

    def member(self, namespace: str) -> Client:
        """A client of one namespace only, to look where a job landed."""
        return Client(self.urls[namespace], namespace=namespace, whole_site=False)


@pytest.fixture(params=["one-server", "two-servers"])
def site(request: pytest.FixtureRequest, default_server: ServerProcess) -> Iterator[Topology]:
    tag = uuid.uuid4().hex[:6]
    a, b = f"a{tag}", f"b{tag}"
    if request.param == "one-server":
        yield Topology(
            default_server.url,
            f"{a}:qa;{b}:*",
            a,
            b,
            {a: default_server.url, b: default_server.url},
            {a: default_server, b: default_server},
        )
        return
    with redis_faults.private_server() as other:
        yield Topology(
            default_server.url,
            f"{a}:qa;{b}@{other.url}:*",
            a,
            b,
            {a: default_server.url, b: other.url},
            {a: default_server, b: other},
        )


def landed_in(site: Topology, jid: str) -> str | None:
    for namespace in (site.a, site.b):
        with site.member(namespace) as member:
            if member.get_job(jid) is not None:
                return namespace
    return None


def test_the_rule_names_a_url_per_namespace_in_a_documented_syntax() -> None:
    from runtime.queue.shards import Shards  # noqa: PLC0415

    rule = Shards.parse("n1@redis://u:p@a:6379/0:emails,sms; n2@unix:///tmp/r.sock:*;n3:x")
    assert rule.namespaces == ("n1", "n2", "n3")
    assert rule.url_of("n1") == "redis://u:p@a:6379/0" and rule.url_of("n2") == "unix:///tmp/r.sock"
    assert rule.url_of("n3") is None and rule.namespace_of("sms") == "n1"
    assert rule.namespace_of("other") == "n2"
    for bad in ("n1@redis://a:6379", "n1@nonsense:q"):
        with pytest.raises(ConfigError, match="namespace@URL"):
            Shards.parse(bad)


def test_a_sharded_client_routes_puts_by_queue_and_finds_any_jid(site: Topology) -> None:
    with Client.from_url(site.url, shards=site.rule) as client:
        assert isinstance(client, Client) and isinstance(client, Site)
        ja = client.queue("qa").put(J, {"n": 1}, retries=0)
        jb = client.queue("qb").put(J, {"n": 2}, retries=0)
        assert (landed_in(site, ja), landed_in(site, jb)) == (site.a, site.b)
        assert [j.queue if j else None for j in client.get_jobs([ja, jb, "x"])] == [
            "qa",
            "qb",
            None,
        ]
        assert client.status()["qa"]["waiting"] == 1 and client.status("qb")["qb"]["waiting"] == 1
        assert client.queues() == ["qa", "qb"]
        with pytest.raises(CrossShard):
            client.put_many([client.queue("qa").spec(J), client.queue("qb").spec(J)])
        [la] = client.queue("qa").pop(1, worker=W)
        [lb] = client.queue("qb").pop(1, worker=W)
        la.complete(result="a")
        lb.fail("app.Boom", "boom")
        assert client.wait(ja, timeout=5) == "a"
        with pytest.raises(JobFailed):
            client.wait(jb, timeout=5)
        assert client.failed() == {"app.Boom": 1}
        assert client.scheduling.requeue(jb) == "waiting"  # found in its namespace
        assert client.cancel(ja, jb) == [ja, jb]
        tombs = client.get_jobs([ja, jb])  # jb had not ended: a tombstone, ja none
        assert [None if j is None else j.state for j in tombs] == [None, JobState.CANCELLED]
        with pytest.raises(NoSuchJob):  # JobCancelled is one
            client.wait(jb, timeout=1)


def test_plain_from_url_and_typed_puts_follow_runtime_shards(
    site: Topology, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUNTIME_SHARDS", site.rule)
    monkeypatch.setenv("REDIS_URL", site.url)
    set_default_client(None)
    try:
        with Client.from_url(site.url) as client:
            assert isinstance(client, Site)
        jid = typed_jobs.greet.put(name="x", path="/p")  # the default client: Client()
        moved = typed_jobs.greet.options(queue="qa").put(name="y", path="/p")
        assert (landed_in(site, jid), landed_in(site, moved)) == (site.b, site.a)
    finally:
        set_default_client(None)


def test_an_async_client_of_a_site_routes_finds_waits_and_sums(site: Topology) -> None:
    async def work() -> None:
        async with AsyncClient.from_url(site.url, shards=site.rule) as ac:
            ja = await ac.queue("qa").put(J, {}, retries=0)
            jb = await typed_jobs.greet.using(ac).aput(name="z", path="/p")
            assert (landed_in(site, ja), landed_in(site, jb)) == (site.a, site.b)
            found = await ac.get_jobs([jb, ja])
            assert [j.queue if j else None for j in found] == ["typed", "qa"]
            with site.member(site.b) as member:
                [lease] = member.queue("typed").pop(1, worker=W)
            waiting = asyncio.create_task(ac.wait(jb, timeout=30))
            await asyncio.sleep(0)
            lease.fail("app.Boom", "boom")
            with pytest.raises(JobFailed):
                await waiting
            with site.member(site.a) as member:
                [lease] = member.queue("qa").pop(1, worker=W)
                lease.complete(result=7)
            assert await ac.wait(ja, timeout=30) == 7
            assert (await ac.status())["qa"]["complete"] == 1
            assert await ac.failed() == {"app.Boom": 1}
            assert sorted(await ac.cancel(ja, jb)) == sorted([ja, jb])
            assert await ac.get_jobs([ja, jb]) == [None, None]

    asyncio.run(asyncio.wait_for(work(), 60))


def test_every_cli_verb_sees_and_acts_on_jobs_of_both_namespaces(
    site: Topology, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RUNTIME_SHARDS", site.rule)
    monkeypatch.setenv("REDIS_URL", site.url)
    monkeypatch.delenv("RUNTIME_NAMESPACE", raising=False)

    def cli(*args: str) -> str:
        code = runtime_cli.run(list(args))
        out, err = capsys.readouterr()
        assert code == 0, (args, out, err)
        return out

    ja, jb = cli("put", "qa", J, "{}", "--retries", "0").strip(), cli("put", "qb", J).strip()
    assert (landed_in(site, ja), landed_in(site, jb)) == (site.a, site.b)
    for jid, queue in ((ja, "qa"), (jb, "qb")):
        assert json.loads(cli("job", jid, "--json"))["queue"] == queue
        assert jid in cli("jobs", queue)
    status = json.loads(cli("status", "--json"))
    assert status["qa"]["waiting"] == 1 and status["qb"]["waiting"] == 1
    with Client.from_url(site.url, shards=site.rule) as client:
        for queue in ("qa", "qb"):
            [lease] = client.queue(queue).pop(1, worker=W)
            lease.fail("app.Boom", "boom")
        for namespace in (site.a, site.b):
            with site.member(namespace) as member:
                member.leases.register_worker(
                    f"w-{namespace}", host="h", pid=1, queues=["q"], concurrency=1
                )
    assert "2  app.Boom" in cli("failed")
    assert ja in (failed := cli("failed", "app.Boom")) and jb in failed
    assert cli("retry", ja).strip() == "waiting"
    assert cli("unfail", "app.Boom").strip() == "moved 1 jobs back to their queues"
    workers = json.loads(cli("workers", "--json"))
    assert {f"w-{site.a}", f"w-{site.b}"} <= set(workers)
    for jid, queue in ((ja, "qa"), (jb, "qb")):
        cli("priority", jid, "-3")
        cli("tag", jid, "vip")
        cli("pause", queue)
        cli("stats", queue)
        cli("resume", queue)
    assert ja in (tagged := cli("tagged", "vip")) and jb in tagged
    cli("config", "timeout", "120")
    for namespace in (site.a, site.b):
        with site.member(namespace) as member:
            assert member.admin.config_get()["timeout"] == 120
            assert [j.priority for j in member.admin.jobs("qa" if namespace == site.a else "qb",
                                                          "waiting")[1]] == [-3]  # fmt: skip
    assert cli("cancel", ja, jb).strip() == "cancelled 2 of 2"
    assert "no failed jobs" in cli("failed")


def test_one_worker_serves_namespaces_on_two_servers_named_in_the_rule(
    default_server: ServerProcess, workdir: Path
) -> None:
    tag = uuid.uuid4().hex[:6]
    a, b = f"a{tag}", f"b{tag}"
    with redis_faults.private_server() as other:
        rule = f"{a}:qa;{b}@{other.url}:qb"
        master = MasterProcess(
            default_server, a, workdir, "qa,qb", env={"RUNTIME_SHARDS": rule}
        ).start()
        try:
            with Client.from_url(default_server.url, shards=rule) as client:
                jids = [
                    client.queue(q).put("tests.integration.jobs:echo", {"q": q})
                    for q in ("qa", "qb")
                ]
                assert [client.wait(jid, timeout=60) for jid in jids] == [{"q": "qa"}, {"q": "qb"}]
            with Client(other.url, namespace=b, whole_site=False) as member:
                job = member.get_job(jids[1])
                assert job is not None and job.state == "complete"
        finally:
            master.close()


def test_the_failures_page_of_a_site_shows_and_retries_both_namespaces(
    site: Topology,
) -> None:
    pytest.importorskip("starlette", reason="the dashboard extra is not installed")
    expect = pytest.importorskip("playwright.sync_api", reason="no playwright").expect
    from tests.dashboard.conftest import chromium_binary, serve  # noqa: PLC0415

    binary = chromium_binary()
    if binary is None:
        pytest.skip("no Chromium")
    from playwright.sync_api import sync_playwright  # noqa: PLC0415

    client = Client.from_url(site.url, shards=site.rule)
    jids = []
    for queue in ("qa", "qb"):
        jid = client.queue(queue).put(J, {}, retries=0)
        [lease] = client.queue(queue).pop(1, worker=W)
        lease.fail("app.Boom", "boom")
        jids.append(jid)
    for queue in ("qa", "qb"):
        client.queue(queue).pause()  # retried jobs stay waiting
    url, server, thread = serve(client)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=binary, headless=True)
            page = browser.new_page()
            page.set_default_timeout(15_000)
            page.on("dialog", lambda dialog: dialog.accept())
            page.goto(f"{url}/failures")
            row = page.locator("tr", has_text="app.Boom")
            expect(row).to_contain_text("2")
            page.goto(f"{url}/failures?group=app.Boom")
            for jid in jids:
                expect(page.locator("main")).to_contain_text(jid)
            page.locator("tr", has_text=jids[1]).get_by_role("button", name="Retry").click()
            expect(page.locator(".flash")).to_contain_text(f"retried {jids[1]}")
            page.goto(f"{url}/failures")
            page.locator("tr", has_text="app.Boom").get_by_role("button", name="Retry all").click()
            expect(page.locator(".flash")).to_have_text("retried 1 failed jobs of app.Boom")
            browser.close()
        assert [j.state if j else None for j in client.get_jobs(jids)] == ["waiting", "waiting"]
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        client.close()


def test_every_dashboard_page_covers_both_namespaces(site: Topology) -> None:
    testclient = pytest.importorskip("starlette.testclient", reason="no dashboard extra")
    from runtime.dashboard.app import create_app  # noqa: PLC0415

    with Client.from_url(site.url, shards=site.rule) as client:
        ja = client.queue("qa").put(J, {}, tags=["vip"], retries=0)
        jb = client.queue("qb").put(J, {}, tags=["vip"], retries=0)
        for queue in ("qa", "qb"):
            [lease] = client.queue(queue).pop(1, worker=W)
            lease.fail("app.Boom", f"boom in {queue}")
        client.scheduling.recur("qa", J, every=3600, id="ra")
        client.scheduling.recur("qb", J, every=3600, id="rb")
        client.set_domain_limit("api.example.com", 5)
        with testclient.TestClient(create_app(client), base_url="http://127.0.0.1") as http:
            for jid in (ja, jb):
                shown = http.get("/job", params={"jid": jid})
                assert shown.status_code == 200 and f"No job {jid}" not in shown.text
            groups = http.get("/failures").text
            assert "app.Boom" in groups and "qa" in groups and "qb" in groups
            group = http.get("/failures", params={"group": "app.Boom"}).text
            assert ja in group and jb in group
            tagged = http.get("/find", params={"q": "vip"}).text
            assert ja in tagged and jb in tagged
            recurring = http.get("/recurring").text
            assert "ra" in recurring and "rb" in recurring
            assert "api.example.com" in http.get("/domains").text
            for queue in ("qa", "qb"):
                assert http.get("/queue", params={"name": queue}).status_code == 200
