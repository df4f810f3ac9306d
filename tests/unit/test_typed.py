"""Typed jobs without Redis: what @job checks, the jobs it makes, how it calls the function."""

from __future__ import annotations

import asyncio
import inspect
from types import SimpleNamespace
from typing import Any, cast

import pytest

import runtime
from runtime import BadArgument, Client, Fail, JobContext, WrongState, job
from runtime.children import allowlist
from runtime.typed import JobFunction, set_default_client

KLASS = "tests.unit.test_typed:send_email"


@job(queue="emails", retries=3, never_retry=(LookupError,), priority=-2, tags=("mail",))
def send_email(ctx: JobContext, *, to: str, subject: str = "hi") -> dict[str, Any]:
    """Sends one email (pretends to)."""
    return {"to": to, "subject": subject, "jid": ctx.jid}


@job
def bare(ctx: JobContext) -> str:
    return "bare"


@job(queue="crawl", never_retry=ValueError)
async def fetch(ctx: JobContext, *, url: str) -> int:
    await asyncio.sleep(0)
    return len(url)


def context(data: dict[str, Any]) -> JobContext:
    """Enough of a job context for calling a JobFunction (it reads .data and .jid)."""
    return cast(JobContext, SimpleNamespace(data=data, jid="j1"))


def plain(ctx: JobContext, *, a: int) -> int:
    return a


# --- what @job makes ------------------------------------------------------------------


def test_a_typed_job_is_named_by_its_module_and_function() -> None:
    assert send_email.klass == KLASS
    assert send_email.queue == "emails"
    assert send_email.__name__ == "send_email"
    assert send_email.__qualname__ == "send_email"
    assert send_email.__module__ == __name__
    assert send_email.__doc__ == "Sends one email (pretends to)."
    assert inspect.unwrap(send_email).__name__ == "send_email"
    assert repr(send_email) == f"<job {KLASS} queue='emails'>"
    assert send_email.never_retry == (LookupError,)
    assert fetch.never_retry == (ValueError,)


def test_the_allow_list_accepts_a_typed_job_as_the_function_of_its_module() -> None:
    found = allowlist.resolve(KLASS, ["tests.unit"])
    assert found is send_email
    assert allowlist.defined_in(send_email, __name__)


def test_a_bare_decorator_puts_on_the_default_queue() -> None:
    assert isinstance(bare, JobFunction)
    assert bare.queue == "default"
    assert bare.spec().queue == "default"
    assert bare.never_retry == ()


def test_the_names_writing_jobs_needs_are_importable_from_runtime() -> None:
    for name in ("Fail", "Retry", "JobContext", "job", "Client", "LeaseLost", "JobFunction"):
        assert name in runtime.__all__ and hasattr(runtime, name)
    assert runtime.__version__


# --- the jobs it puts -----------------------------------------------------------------


def test_the_spec_carries_the_keyword_arguments_as_data_and_the_defaults_as_options() -> None:
    spec = send_email.spec(to="a@b.c")
    assert (spec.queue, spec.klass, spec.data_json) == ("emails", KLASS, '{"to":"a@b.c"}')
    assert spec.options["retries"] == 3
    assert spec.options["priority"] == -2
    assert spec.options["tags"] == ["mail"]


def test_options_set_per_put_replace_the_defaults_and_leave_the_job_as_it_was() -> None:
    later = send_email.options(delay=30, priority=5, queue="bulk", jid="a" * 32, unique_key="k")
    spec = later.spec(to="a@b.c", subject="x")
    assert spec.queue == "bulk" and spec.klass == KLASS
    assert spec.options["priority"] == 5 and spec.options["delay_ms"] == 30_000
    assert spec.options["jid"] == "a" * 32 and spec.options["unique_key"] == "k"
    assert spec.options["retries"] == 3  # from the decorator
    assert later.defaults["priority"] == 5
    assert send_email.spec(to="a@b.c").options["priority"] == -2  # unchanged
    assert send_email.defaults == {
        "queue": "emails",
        "retries": 3,
        "priority": -2,
        "tags": ("mail",),
    }


def test_options_given_as_a_generator_are_read_once_and_kept() -> None:
    tagged = send_email.options(tags=(t for t in ["a", "b"]))
    assert tagged.spec(to="x").options["tags"] == ["a", "b"]
    assert tagged.spec(to="y").options["tags"] == ["a", "b"]


def test_a_bad_option_is_refused_when_it_is_set_not_at_the_first_put() -> None:
    with pytest.raises(BadArgument, match="unknown option delai"):
        send_email.options(**cast(Any, {"delai": 3}))
    with pytest.raises(BadArgument, match="priority must be an integer"):
        send_email.options(priority=cast(Any, "high"))
    with pytest.raises(BadArgument, match="unknown option"):
        job(colour="red")  # type: ignore[call-overload]
    with pytest.raises(BadArgument, match="queue name"):
        job(queue="a b")
    with pytest.raises(BadArgument, match="jid names one job"):
        job(jid="x")


def test_positional_arguments_are_refused_with_one_clear_error() -> None:
    with pytest.raises(BadArgument, match=r"keyword arguments only .* 1 positional argument$"):
        cast(Any, send_email).put("a@b.c")
    with pytest.raises(BadArgument, match="keyword arguments only"):
        cast(Any, send_email).spec("a@b.c", "x")


def test_arguments_that_do_not_fit_the_function_are_refused_before_anything_is_sent() -> None:
    with pytest.raises(BadArgument, match="missing a required argument: 'to'"):
        cast(Any, send_email).spec()
    with pytest.raises(BadArgument, match="unexpected keyword argument 'cc'"):
        send_email.spec(to="a", **cast(Any, {"cc": "b"}))
    with pytest.raises(BadArgument, match=r"send_email.options\(delay=...\).put"):
        send_email.spec(to="a", **cast(Any, {"delay": 30}))
    with pytest.raises(BadArgument, match="data is not JSON"):
        send_email.spec(to=cast(Any, {1, 2}))


def test_put_many_refuses_one_jid_for_many_jobs() -> None:
    with pytest.raises(BadArgument, match="one jid cannot name many jobs"):
        send_email.options(jid="x").put_many([{"to": "a"}, {"to": "b"}])


def test_a_job_defined_in_the_script_being_run_cannot_be_put() -> None:
    def script_job(ctx: JobContext, *, a: int) -> None:
        pass

    script_job.__module__, script_job.__qualname__ = "__main__", "script_job"
    made = job(script_job)
    with pytest.raises(BadArgument, match="__main__"):
        made.spec(a=1)


@pytest.mark.parametrize(
    ("source", "error"),
    [
        ("def f(): pass", "job context as its first argument"),
        ("def f(*, ctx): pass", "job context as its first argument"),
        ("def f(ctx, a, /): pass", "by position only"),
        ("def f(ctx, *args): pass", "by position only"),
    ],
)
def test_functions_a_worker_could_not_call_by_keyword_are_refused(source: str, error: str) -> None:
    namespace: dict[str, Any] = {"__name__": "tests.unit.somewhere"}
    exec(source, namespace)
    with pytest.raises(BadArgument, match=error):
        job(namespace["f"])


def test_only_functions_at_the_top_level_of_a_module_can_be_jobs() -> None:
    def nested(ctx: JobContext) -> None:
        pass

    class Jobs:
        def method(self, ctx: JobContext) -> None:
            pass

    with pytest.raises(BadArgument, match="top level of its module"):
        job(nested)
    with pytest.raises(BadArgument, match="top level of its module"):
        job(cast(Any, Jobs.method))
    with pytest.raises(BadArgument, match="needs a function"):
        job(cast(Any, print))
    with pytest.raises(BadArgument, match="never_retry must name exception classes"):
        job(never_retry=cast(Any, ("ValueError",)))(plain)


# --- calling it (what the worker's child does) ------------------------------------------


def test_called_with_the_context_alone_it_passes_the_jobs_data_as_keywords() -> None:
    assert send_email(context({"to": "a@b.c"})) == {"to": "a@b.c", "subject": "hi", "jid": "j1"}
    assert send_email(context({"to": "a", "subject": "s"}))["subject"] == "s"
    assert bare(context({})) == "bare"


def test_called_with_keywords_it_passes_them_and_not_the_data() -> None:
    got = send_email(context({"to": "ignored"}), to="given")
    assert got["to"] == "given"


def test_data_that_does_not_fit_fails_the_job_at_once() -> None:
    with pytest.raises(Fail, match="cannot take this job's data: missing a required") as missing:
        send_email(context({}))
    assert missing.value.group == "runtime.BadArgument"
    with pytest.raises(Fail, match="unexpected keyword argument 'cc'"):
        send_email(context({"to": "a", "cc": "b"}))
    with pytest.raises(BadArgument, match="keyword arguments only"):
        send_email(context({}), *cast(Any, ["a@b.c"]))


def test_an_async_job_returns_its_coroutine_for_the_child_to_run() -> None:
    coroutine = fetch(context({"url": "http://x"}))
    assert inspect.iscoroutine(coroutine)
    assert asyncio.run(coroutine) == len("http://x")
    assert fetch.spec(url="u").queue == "crawl"


# --- which client puts ------------------------------------------------------------------


def test_inside_a_workers_child_there_is_no_default_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RUNTIME_CHILD", "1")
    with pytest.raises(WrongState, match=r"ctx.put\(job.spec"):
        send_email.put(to="a@b.c")
    mine = cast(Client, object())
    assert send_email.using(mine).client is mine  # a client given explicitly is used


def test_put_goes_to_the_client_given_else_the_default_one() -> None:
    mine, default = cast(Client, object()), cast(Client, object())
    assert send_email.using(mine).client is mine
    assert send_email.using(mine).options(delay=1).client is mine
    set_default_client(default)
    try:
        assert send_email.client is default
        assert send_email.using(mine).client is mine
    finally:
        set_default_client(None)
