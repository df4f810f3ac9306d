"""The actions: every one a POST of a small form, behind the same-origin guard
(security.py). Each does one Client call (or a loop of them for a whole failure
group), then redirects (303) to the page the form names in `next`, with a one-line
message for that page: what was done, or why it was refused."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from runtime.dashboard import jobreads, reads
from runtime.dashboard.render import set_flash
from runtime.errors import BadArgument, Error
from runtime.queue.api.client import Client
from runtime.vocabulary import CancelledBy

log = logging.getLogger(__name__)

FORM_MAX_BYTES = 16 * 1024
Form = dict[str, str]


async def _form(request: Request) -> Form:
    """An application/x-www-form-urlencoded body as {name: first value}."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > FORM_MAX_BYTES:
            raise BadArgument("form too large")
    fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {name: values[0] for name, values in fields.items()}


def one_line(err: Error) -> str:
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def back_to(prefix: str, target: str | None) -> str:
    """Where to go after an action: a path of this dashboard, else its overview."""
    home = f"{prefix}/"
    if not target:
        return home
    parts = urlsplit(target)
    path_ok = target.startswith(home) and not target.startswith("//") and "\\" not in target
    if parts.scheme or parts.netloc or not path_ok:
        return home
    return target


def _field(form: Form, name: str) -> str:
    value = form.get(name, "")
    if not value:
        raise BadArgument(f"missing {name}")
    return value


def pause(client: Client, form: Form) -> str:
    client.queue(_field(form, "queue")).pause()
    return f"paused {form['queue']}"


def resume(client: Client, form: Form) -> str:
    client.queue(_field(form, "queue")).resume()
    return f"resumed {form['queue']}"


def retry(client: Client, form: Form) -> str:
    state = client.scheduling.requeue(_field(form, "jid"))
    return f"retried {form['jid']}: now {state}"


def cancel(client: Client, form: Form) -> str:
    gone = client.cancel(_field(form, "jid"), by=CancelledBy.DASHBOARD)
    return f"cancelled {form['jid']}" if gone else f"{form['jid']} was already gone"


def delete(client: Client, form: Form) -> str:
    """A finished job (complete or failed) is deleted as a cancel deletes one."""
    gone = client.cancel(_field(form, "jid"), by=CancelledBy.DASHBOARD)
    return f"deleted {form['jid']}" if gone else f"{form['jid']} was already gone"


def priority(client: Client, form: Form) -> str:
    raw = _field(form, "priority").strip()
    try:
        value = int(raw)
    except ValueError:
        raise BadArgument(f"priority must be an integer, got {raw!r}") from None
    client.scheduling.set_priority(_field(form, "jid"), value)
    return f"priority of {form['jid']} set to {value}"


def retry_group(client: Client, form: Form) -> str:
    moved = jobreads.retry_group(client, _field(form, "group"))
    return f"retried {moved} failed jobs of {form['group']}"


def delete_group(client: Client, form: Form) -> str:
    deleted = jobreads.delete_group(client, _field(form, "group"))
    return f"deleted {deleted} failed jobs of {form['group']}"


def retry_batch(client: Client, form: Form) -> str:
    moved = client.retry_batch(_field(form, "bid"))
    return f"retried {moved} failed jobs of batch {form['bid']}"


ACTIONS: dict[str, Callable[[Client, Form], str]] = {
    "pause": pause,
    "resume": resume,
    "retry": retry,
    "cancel": cancel,
    "delete": delete,
    "priority": priority,
    "retry-group": retry_group,
    "delete-group": delete_group,
    "retry-batch": retry_batch,
}


def _client_for(state: Any, form: Form) -> Client:
    """The client of the namespace the action is about (a sharded site's: its
    queue's, or its job's); failure groups are the app's own namespace's."""
    if form.get("queue"):
        return reads.of_queue(state, str(form["queue"]))
    if form.get("jid"):
        return reads.of_job(state, str(form["jid"]))
    client: Client = state.client
    return client


async def act(request: Request) -> Response:
    """POST action/<name>: runs it, then back to `next` with its message."""
    prefix: str = request.app.state.prefix
    name = request.path_params["name"]
    form = await _form(request)
    target = back_to(prefix, form.get("next"))
    action = ACTIONS.get(name)
    if action is None:
        return Response(f"no action {name!r}\n", status_code=404, media_type="text/plain")
    try:
        client = _client_for(request.app.state, form)
        kind, text = "ok", await run_in_threadpool(action, client, form)
        log.info("dashboard action %s: %s", name, text)
    except Error as err:
        kind, text = "error", f"{name} refused: {one_line(err)}"
    response = RedirectResponse(target, status_code=303)
    set_flash(response, prefix, kind, text)
    return response
