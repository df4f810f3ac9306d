"""The command line's edges: URLs that name what is not there (exit 2, a line
saying what is wrong), and names that are not known (issue 28, items 5 and 6)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator

import pytest

from runtime import Client
from runtime.cli import run
from runtime.queue import urls
from tests.integration.conftest import Invoke
from tests.support.topologies import Node, free_port, short_dir


@pytest.fixture(scope="module")
def tcp_server() -> Iterator[Node]:
    """A plain redis-server on a loopback port (no Sentinel)."""
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    directory = short_dir("plain")
    node = Node(binary, directory, free_port()).start()
    yield node
    node.stop()
    shutil.rmtree(directory, ignore_errors=True)


def _run(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str]:
    code = run(["--url", url, *args])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("verb", [["status"], ["put", "q", "a.b:c"], ["config"]])
def test_a_db_the_server_does_not_have_is_a_configuration_error(
    tcp_server: Node, capsys: pytest.CaptureFixture[str], verb: list[str]
) -> None:
    code, err = _run(capsys, f"redis://{tcp_server.address}/99", *verb)
    assert code == 2, err
    assert err.count("\n") == 1
    assert f"Redis at redis://{tcp_server.address}/99 has no such db" in err


def test_sentinels_at_a_plain_server_are_a_configuration_error(
    tcp_server: Node, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"redis+sentinel://{tcp_server.address}/main"
    code, err = _run(capsys, url, "status")
    assert code == 2, err
    assert err.count("\n") == 1
    assert err.startswith(f"runtime: error: {url} is not a Sentinel: "), err


def test_sentinels_that_answer_nothing_are_one_short_line_and_exit_3(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"redis+sentinel://127.0.0.1:{free_port()}/main"
    code, err = _run(capsys, url, "status")
    assert code == 3, err
    assert err.count("\n") == 1 and len(err) < 300, err  # not redis-py's whole repr
    assert "no sentinel there named a primary for service 'main'" in err


@pytest.mark.parametrize("url", ["http://h:6379", "h:6379", "redis+sentinal://h/main"])
def test_a_bad_scheme_lists_every_accepted_form(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    code, err = _run(capsys, url, "status")
    assert code == 2, err
    assert err.count("\n") == 1
    for scheme in ("redis://", "rediss://", "unix://", "redis+sentinel://", "redis+cluster://"):
        assert scheme in err, (scheme, err)
    assert len(urls.FORMS) == 5


def test_a_worker_given_a_db_the_server_does_not_have_exits_2(
    tcp_server: Node, plain_client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"redis://{tcp_server.address}/99"
    code, err = _run(capsys, url, "worker", "tests.integration.jobs", "-q", "q", "-c", "1")
    assert code == 2, err
    assert "has no such db" in err.splitlines()[-1]


def test_reads_of_a_queue_never_used_exit_1_naming_the_known_ones(
    cli: Invoke, plain_client: Client
) -> None:
    plain_client.queue("emails").put("a.b:c", {})
    plain_client.queue("images").put("a.b:c", {})
    said = "runtime: error: no queue emials (known queues: emails, images)\n"
    for verb in (["status", "emials"], ["jobs", "emials"], ["stats", "emials"]):
        assert cli(*verb) == (1, "", said), verb
    assert cli("status", "emails", "imgs", "x")[2] == (
        "runtime: error: no queues imgs, x (known queues: emails, images)\n"
    )
    assert cli("status", "emails")[0] == 0 and cli("jobs", "emails")[0] == 0
    assert cli("stats", "emails")[0] == 0
    code, out, _ = cli("jobs", "emails", "--state", "failed")
    assert (code, out) == (0, "0 failed in emails\n"), "a known queue's empty state reads as 0"


def test_the_known_queues_named_are_cut_after_a_dozen(cli: Invoke, plain_client: Client) -> None:
    for n in range(30):
        plain_client.queue(f"q{n:02}").put("a.b:c", {})
    code, _, err = cli("jobs", "nope")
    assert code == 1
    assert err == (
        "runtime: error: no queue nope (known queues: "
        + ", ".join(f"q{n:02}" for n in range(12))
        + " ... and 18 more)\n"
    )


def test_failed_of_a_group_without_failed_jobs_exits_1_naming_the_groups(
    cli: Invoke, plain_client: Client
) -> None:
    assert cli("failed", "builtins.ValueError") == (
        1,
        "",
        "runtime: error: no failed jobs in group builtins.ValueError (no failure groups yet)\n",
    )
    q = plain_client.queue("q")
    q.put("a.b:c", {}, retries=0)
    [job] = q.pop(1, worker="w")
    job.fail("builtins.ValueError", "Traceback\nValueError: nope")
    code, _, err = cli("failed", "ValueError")
    assert code == 1
    assert err == (
        "runtime: error: no failed jobs in group ValueError "
        "(known failure groups: builtins.ValueError)\n"
    )
    assert cli("failed", "builtins.ValueError")[0] == 0


def test_pause_and_resume_of_a_queue_never_used_are_refused_unless_created(
    cli: Invoke, plain_client: Client
) -> None:
    plain_client.queue("emails").put("a.b:c", {})
    code, out, err = cli("pause", "emials")
    assert (code, out) == (1, "")
    assert err.startswith("runtime: error: no queue emials (known queues: emails); --create")
    code, _, err = cli("resume", "emials")
    assert code == 1 and err == "runtime: error: no queue emials (known queues: emails)\n"
    assert plain_client.queues() == ["emails"], "nothing was added"
    assert cli("pause", "--create", "later") == (0, "paused later\n", "")
    assert sorted(plain_client.queues()) == ["emails", "later"]
    assert cli("resume", "later") == (0, "resumed later\n", "")


def test_put_to_a_new_queue_works_and_says_it_is_new(cli: Invoke, plain_client: Client) -> None:
    code, out, err = cli("put", "emails", "a.b:c")
    assert code == 0 and plain_client.get_job(out.strip()) is not None
    assert err == "runtime: note: queue emails is new; no other queues yet\n"
    code, out, err = cli("put", "emials", "a.b:c")
    assert code == 0 and plain_client.get_job(out.strip()) is not None
    assert err == "runtime: note: queue emials is new; known other queues: emails\n"
    code, _, err = cli("put", "emails", "a.b:c")
    assert (code, err) == (0, ""), "a known queue's put says nothing more"


def test_the_reading_verbs_new_json_is_what_their_text_says(
    cli: Invoke, plain_client: Client
) -> None:
    q = plain_client.queue("q")
    q.put("a.b:c", {}, jid="f1", retries=0, tags=["red"])
    [job] = q.pop(1, worker="w")
    job.fail("builtins.ValueError", "Traceback\nValueError: nope")
    plain_client.scheduling.track("f1")
    plain_client.scheduling.recur("q", "a.b:c", {"n": 1}, every=60, id="tick")
    plain_client.set_domain_limit("example.com", 10, 1, 2)

    def json_of(*args: str) -> object:
        code, out, err = cli(*args, "--json")
        assert (code, err) == (0, ""), (args, err)
        return json.loads(out)

    assert json_of("failed") == {"builtins.ValueError": 1}
    page = json_of("failed", "builtins.ValueError")
    assert isinstance(page, dict) and page["total"] == 1
    assert [j["jid"] for j in page["jobs"]] == ["f1"]
    tagged = json_of("tagged", "red")
    assert isinstance(tagged, dict) and [j["jid"] for j in tagged["jobs"]] == ["f1"]
    tracked = json_of("tracked")
    assert isinstance(tracked, list) and [j["jid"] for j in tracked] == ["f1"]
    assert "token" not in tracked[0], "a lease's credential is never printed"
    recurrences = json_of("recur", "list")
    assert isinstance(recurrences, list) and len(recurrences) == 1
    recurrence = recurrences[0]
    assert (recurrence["id"], recurrence["every"], recurrence["data"]) == ("tick", 60, {"n": 1})
    assert json_of("limit") == {"example.com": {"rate": 10, "period": 1, "burst": 2}}
    settings = json_of("config")
    assert isinstance(settings, dict) and settings["heartbeat"] == 60
    assert json_of("config", "q-heartbeat", "30") == {"q-heartbeat": 30}
    assert json_of("config", "jobs-history") == {"jobs-history": 604800}
    assert cli("limit", "x.org", "--json")[0] == 2, "--json lists: it takes no DOMAIN"


def test_unfail_and_forget_of_unknown_names_list_the_known_ones(
    cli: Invoke, plain_client: Client
) -> None:
    plain_client.queue("emails").put("a.b:c", {})
    assert cli("queue", "forget", "emials") == (
        1,
        "",
        "runtime: error: no queue emials (known queues: emails)\n",
    )
    assert cli("unfail", "ValueError") == (
        1,
        "",
        "runtime: error: no failed jobs in ValueError (no failure groups yet)\n",
    )
