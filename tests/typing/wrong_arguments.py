"""Each marked line is an error mypy must report (test_mypy.py strips the ignores and
checks it does; the project's own mypy run fails if one of them is not an error)."""

from __future__ import annotations

from runtime import AsyncClient, JobContext, job


@job(queue="emails", retries=5)
def send_email(ctx: JobContext, *, to: str, copies: int = 1) -> dict[str, bool]:
    return {"sent": True}


def usage(ctx: JobContext) -> None:
    send_email.put(to=42)  # type: ignore[arg-type]
    send_email.put(to="a@b.c", copies="2")  # type: ignore[arg-type]
    send_email.put(too="a@b.c")  # type: ignore[call-arg]
    send_email.put()  # type: ignore[call-arg]
    send_email.put("a@b.c")  # type: ignore[call-arg]
    send_email.options(delay="soon").put(to="a@b.c")  # type: ignore[arg-type]
    send_email.options(delai=30).put(to="a@b.c")  # type: ignore[call-arg]
    send_email.spec(to=b"a@b.c")  # type: ignore[arg-type]
    send_email(ctx, to=None)  # type: ignore[call-overload]
    ctx.put(send_email.spec(to=1))  # type: ignore[arg-type]
    sent: int = send_email(ctx)  # type: ignore[assignment]
    print(sent)


async def async_usage(ac: AsyncClient) -> None:
    await send_email.using(ac).aput(to=42)  # type: ignore[arg-type]
    await send_email.using(ac).aput(too="a@b.c")  # type: ignore[call-arg]
    await ac.queue("emails").put("a.b:c", {}, priority="high")  # type: ignore[arg-type]


@job(queue="emails")  # type: ignore[arg-type]
def no_context(to: str) -> None:
    pass


@job(queue=7)  # type: ignore[call-overload, untyped-decorator]
def bad_queue(ctx: JobContext) -> None:
    pass
