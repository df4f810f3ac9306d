"""Pages from templates: one Jinja2 environment with autoescape on for every
template, the filters the templates share (times, durations, numbers, JSON, a
job's data in short, a traceback's parts), and
the one-time message an action leaves for the page it redirects to (a cookie)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlencode

import jinja2
from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from runtime.dashboard import tracebacks
from runtime.units import duration

HERE = Path(__file__).parent
FLASH_COOKIE = "runtime_flash"
RANDOM_JID = re.compile(r"[0-9a-f]{32}")  # runtime's own jids: uuid4().hex
BREAK_AFTER = re.compile(r"(?<=[/:._-])")  # where a long name may wrap: after these


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # every template, whatever its name
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        when=when,
        ago=ago,
        duration=duration,
        number=number,
        pretty=pretty,
        q=quote_part,
        preview=preview,
        folded=tracebacks.parts,
        breakable=breakable,
    )
    env.tests["random_jid"] = random_jid
    env.globals["query"] = query
    return env


def when(ms: int | None) -> str:
    """An epoch-ms time as UTC: 2025-01-31 12:00:00Z."""
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def ago(ms: int | None, now_ms: int) -> str:
    """How long ago an epoch-ms time was: "1.4 min ago"."""
    return "-" if ms is None else f"{duration(max(0, now_ms - ms) / 1000)} ago"


def number(value: float | None) -> str:
    """1234567 -> 1,234,567; a rate keeps one decimal; None -> -."""
    if value is None:
        return "-"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.1f}"
    return f"{int(value):,}"


def pretty(value: Any) -> str:
    """JSON as a person reads it (escaped by the template like any text)."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def preview(data: Any) -> str:
    """A job's data on one line, to tell jobs apart in a list: its JSON without the
    outer braces ("to": "a@b.c", "n": 3); "" for no data."""
    text = json.dumps(data, ensure_ascii=False, default=str, separators=(", ", ": "))
    if isinstance(data, dict):
        text = text[1:-1]
    return text


def random_jid(jid: str) -> bool:
    """Whether `jid` is one runtime made (32 random hex digits): any part of it tells
    jobs apart, so a list may cut it short. A jid of the caller's own or a
    recurring job's ("<queue>/<klass>-<tick ms>") may differ from the next only
    at its end, and is shown whole."""
    return RANDOM_JID.fullmatch(jid) is not None


def breakable(text: str) -> Markup:
    """A long name that may wrap after each / : . _ or - (escaped; <wbr> between)."""
    return Markup("<wbr>").join(escape(part) for part in BREAK_AFTER.split(str(text)))


def quote_part(value: str) -> str:
    """A value for a URL path or query part."""
    return quote(str(value), safe="")


def query(**params: Any) -> str:
    """A query string of the parameters that are not None or empty: "?a=1&b=x"; a
    list repeats its name: query(q=["a", "b"]) == "?q=a&q=b"."""
    kept = {k: v for k, v in params.items() if v is not None and v not in ("", [])}
    return "?" + urlencode(kept, doseq=True) if kept else ""


def page(request: Request, template: str, status: int = 200, /, **context: Any) -> Response:
    """Renders a template with what every page shows: the prefix, where the page is
    (`here`, where its actions come back to), and the message an action left."""
    env: jinja2.Environment = request.app.state.templates
    flash = request.cookies.get(FLASH_COOKIE)
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    body = env.get_template(template).render(
        prefix=request.app.state.prefix, here=here, flash=_flash(flash), **context
    )
    response = HTMLResponse(body, status_code=status)
    if flash is not None:
        response.delete_cookie(FLASH_COOKIE, path=request.app.state.prefix or "/")
    return response


def _flash(raw: str | None) -> tuple[str, str] | None:
    """(kind, text) from the cookie: "ok:..." or "error:..."."""
    if not raw:
        return None
    kind, _, text = raw.partition(":")
    return (kind if kind in ("ok", "error") else "ok"), unquote(text)[:500]


def set_flash(response: Response, prefix: str, kind: str, text: str) -> None:
    response.set_cookie(
        FLASH_COOKIE,
        f"{kind}:{quote(text[:500])}",
        max_age=60,
        path=prefix or "/",
        httponly=True,
        samesite="strict",
    )
