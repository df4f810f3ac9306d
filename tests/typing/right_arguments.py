"""Typed jobs used as docs/writing-jobs.md shows: mypy accepts all of it."""

from __future__ import annotations

from datetime import UTC, datetime

from runtime import AsyncClient, Client, JobContext, JobFunction, job


@job(queue="emails", retries=5, never_retry=(LookupError,), priority=-1, timeout=60)
def send_email(ctx: JobContext, *, to: str, copies: int = 1) -> dict[str, bool]:
    return {"sent": True}


@job
async def fetch(ctx: JobContext, *, url: str) -> int:
    return len(url)


def usage(ctx: JobContext, client: Client) -> None:
    jid: str = send_email.put(to="a@b.c")
    send_email.put(to="a@b.c", copies=2)
    send_email.options(delay=30, priority=5, unique_key="a@b.c").put(to="a@b.c")
    send_email.options(at=datetime(2030, 1, 1, tzinfo=UTC), depends=[jid]).put(to="x")
    send_email.using(client).put(to="a@b.c")
    jids: list[str] = send_email.put_many([{"to": "a@b.c"}, {"to": "d@e.f"}])
    client.put_many([send_email.spec(to="a@b.c"), fetch.spec(url="https://example.com")])
    result: dict[str, bool] = send_email(ctx, to="a@b.c")
    ctx.put(send_email.spec(to="d@e.f"))  # from a job: typed through spec()
    ctx.put(send_email.options(delay=5).spec(to="d@e.f"), now=True)
    ctx.put(send_email, to="d@e.f")
    same: JobFunction[..., dict[str, bool]] = send_email
    print(jids, result, same)


async def async_usage(ac: AsyncClient) -> None:
    jid: str = await send_email.using(ac).aput(to="a@b.c")
    await send_email.using(ac).options(delay=30).aput(to="a@b.c", copies=2)
    jids: list[str] = await send_email.using(ac).aput_many([{"to": "a@b.c"}])
    await ac.queue("emails").put("myapp.jobs:send", {"to": "a@b.c"}, priority=1, tags=["x"])
    result = await ac.wait(jid, timeout=30)
    print(jids, result)
