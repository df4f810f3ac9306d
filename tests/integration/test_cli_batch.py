"""`runtime batch BID [--json] [--retry-failed]`: a batch's counts, callbacks and
failed jobs; bad input is one line and a non-zero exit."""

from __future__ import annotations

import json

from runtime import Client
from tests.integration.conftest import Invoke

W = "host-1"


def test_batch_shows_counts_callbacks_and_failed_jobs(cli: Invoke, plain_client: Client) -> None:
    b = plain_client.batch(on_complete=("cb", "app.jobs:done", {}), description="nightly import")
    b.put_many([b.queue("q").spec("app.jobs:work", {}, jid=f"j{i}") for i in range(3)])
    b.close()
    leases = plain_client.queue("q").pop(3, worker=W)
    leases[0].complete()
    leases[1].fail("app.Boom", "boom")
    code, out, _ = cli("batch", b.bid)
    assert code == 0
    assert f"batch {b.bid}: open, sealed" in out
    assert "total 3  pending 1  completed 1  failed 1 (cancelled 0)" in out
    assert "description: nightly import" in out
    assert "on_complete: not yet" in out and "failed jobs: j1" in out
    leases[2].complete()
    code, out, _ = cli("batch", b.bid, "--json")
    shown = json.loads(out)
    assert code == 0 and shown["pending"] == 0 and shown["complete_jid"]
    assert shown["failed_jids"] == ["j1"] and shown["settled_ms"] is not None
    code, out, _ = cli("batch", b.bid, "--retry-failed")
    assert code == 0 and "1 failed jobs run again" in out and "pending 1" in out


def test_batch_of_an_unknown_or_bad_bid_is_one_line_and_an_exit_code(cli: Invoke) -> None:
    code, out, err = cli("batch", "nope")
    assert (code, out, err.strip()) == (1, "", "runtime: error: no batch nope")
    code, _, err = cli("batch", "a b")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
