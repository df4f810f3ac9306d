"""A running job's lease token is its holder's credential (it may complete or
fail the job in the holder's place): no read shows it. A real master runs a
long job; its live token, read from Redis itself, appears in no output of any
reading CLI verb (as text, and as JSON where the verb has --json), no
dashboard page or JSON, no /metrics, and no read of the Python API."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from runtime import Client
from tests.dashboard.conftest import Dashboard
from tests.integration.conftest import Invoke, StartMaster
from tests.support.waiting import wait_for

pytest.importorskip("starlette", reason="the dashboard extra is not installed")

JID = "leaky"
# every verb that only reads (argv after `runtime`); each runs with --json too where it has it
READING_VERBS: list[tuple[str, ...]] = [
    ("status",),
    ("job", JID),
    ("jobs", "q", "--state", "running"),
    ("failed",),
    ("stats", "q"),
    ("workers",),
    ("tagged", "secret"),
    ("tracked",),
    ("config",),
    ("recur", "list"),
    ("events", "--idle", "0.1"),
]
PAGES = [
    "/",
    "/queues",
    "/queue?name=q&state=running",
    f"/job?jid={JID}",
    f"/find?q={JID}",
    "/find?q=secret",
    "/failures",
    "/workers",
    "/domains",
    "/recurring",
    "/stats?queue=q",
    "/live.json?queue=q",
    f"/live.json?jid={JID}",
    "/metrics",
]


def live_token(client: Client) -> str:
    """The token of JID's lease as Redis holds it, once a master runs it."""
    raw: Any = client.redis.hget(client.keys.key("jobs"), JID)
    meta = json.loads(bytes(raw).decode().partition("\n")[0]) if raw else {}
    token = meta.get("l") if meta.get("s") == "running" else None
    return token if isinstance(token, str) else ""


def with_json(cli: Invoke, argv: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The verb as given, and with --json if its help offers it."""
    _, helped, _ = cli(*argv[:2] if argv[0] == "recur" else argv[:1], "--help")
    return [argv, (*argv, "--json")] if "--json" in helped else [argv]


def test_no_read_shows_a_running_jobs_lease_token(
    dashboard: Dashboard, start_master: StartMaster, cli: Invoke
) -> None:
    client = dashboard.client
    client.queue("q").put(
        "tests.integration.jobs:sleep", {"seconds": 60}, jid=JID, tags=["secret"], tracked=True
    )
    start_master("q")
    wait_for(lambda: live_token(client), 30, what="the master to run the job")
    token = live_token(client)

    shown: dict[str, str] = {}
    for verb in READING_VERBS:
        for argv in with_json(cli, verb):
            code, out, err = cli(*argv)
            assert code == 0, (argv, err)
            shown["runtime " + " ".join(argv)] = out + err
    for path in PAGES:
        with urllib.request.urlopen(dashboard.url + path, timeout=10) as response:
            shown[path] = response.read().decode()
    reads: dict[str, Any] = {
        "get_job": client.get_job(JID),
        "get_jobs": client.get_jobs([JID]),
        "jobs": client.admin.jobs("q", "running", 0, 10),
        "progressing": client.admin.progressing("q"),
        "tagged": client.scheduling.tagged("secret"),
        "tracked": client.scheduling.tracked(),
        "workers": client.admin.workers(),
        "snapshot": client.admin.snapshot(),
    }
    shown.update({name: repr(value) for name, value in reads.items()})

    assert live_token(client) == token, "the job ran on through every read"
    assert shown[f"/job?jid={JID}"].count(JID) > 0, "the job page shows the job"
    leaked = sorted(name for name, text in shown.items() if token in text)
    assert leaked == [], f"the lease token {token} shows in {leaked}"
