"""The dashboard shows a namespace holding both record forms (compact-records
0, then 1 between two puts: lib/job.lua) alike."""

from __future__ import annotations

from typing import Any

import pytest

from tests.dashboard.conftest import Dashboard

httpx: Any = pytest.importorskip("httpx", reason="httpx is not installed")
pytest.importorskip("starlette", reason="the dashboard extra is not installed")


def test_a_compact_job_and_its_json_twin_show_alike(dashboard: Dashboard) -> None:
    client = dashboard.client
    q = client.queue("twins")
    client.admin.config_set("compact-records", "0")
    q.put("tests.integration.jobs:noop", {"mark": "json-one"}, jid="as-json", priority=2)
    client.admin.config_set("compact-records", "1")
    q.put("tests.integration.jobs:noop", {"mark": "compact-one"}, jid="compact", priority=2)
    as_json = client.redis.hget(client.keys.key("jobs"), "as-json")
    assert isinstance(as_json, bytes) and as_json.startswith(b"{")
    raw = client.redis.hget(client.keys.key("jobs"), "compact")
    assert isinstance(raw, bytes) and raw.startswith(b"w1 2 ")
    with httpx.Client(base_url=dashboard.url, timeout=10) as http:
        pages = {jid: http.get("/job", params={"jid": jid}) for jid in ("as-json", "compact")}
        listing = http.get("/queue", params={"name": "twins"}).text
    for jid, page in pages.items():
        assert page.status_code == 200
        for shown in ("tests.integration.jobs:noop", "twins", "waiting", jid):
            assert shown in page.text, (jid, shown)
    assert "json-one" in pages["as-json"].text and "compact-one" in pages["compact"].text
    assert "as-json" in listing and "compact" in listing
