"""Typed jobs: `@job` makes a function `fn(ctx: JobContext, *, ...)` a job.

    @job(queue="emails", retries=5, never_retry=(ValueError,))
    def send_email(ctx: JobContext, *, to: str) -> dict[str, bool]: ...

    jid = send_email.put(to="a@b.c")                     # checked by mypy (ParamSpec)
    send_email.options(delay=30, priority=-1).put(to="a@b.c")
    send_email.using(client).put_many([{"to": "a@b.c"}, {"to": "d@e.f"}])
    jid = await send_email.using(async_client).aput(to="a@b.c")   # asyncio

The klass is the function's import path (`module:name`), the job's data its
keyword arguments (JSON). A put's options (delay, at, priority, unique_key,
depends, jid ...) cannot share `put`'s keywords with the function's arguments
and stay typed (a ParamSpec takes no extra keywords, and a job may well have
an argument called `delay`), so they go through `.options(...)`, a TypedDict
mypy checks too, which answers a JobFunction with them set.

`put` goes to the client given with `.using(client)`, else the process's
default client (`set_default_client`, else `Client()`: `REDIS_URL` or the
embedded Redis; a sharded site's when RUNTIME_SHARDS is set). `aput` goes to
the `AsyncClient` given with `.using(ac)`, checked as `put` is. Inside a job,
put follow-up jobs with `ctx.put(send_email, to=...)`: they go through the
master, committed with the job's completion.

The worker calls the JobFunction with the context alone; it then passes the
job's data as the keyword arguments. It is `functools.update_wrapper`'d from
the function (`__module__`, `__qualname__`, `__wrapped__`), so a worker's
allow-list accepts it as the function of its module.
"""

from __future__ import annotations

import copy
import functools
import inspect
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Generic,
    ParamSpec,
    TypeVar,
    Unpack,
    cast,
    overload,
)

from runtime.children.context import JobContext
from runtime.config import CHILD_MARKER
from runtime.errors import BadArgument, Fail, WrongState
from runtime.queue.wire import JobOptions, JobSpec
from runtime.vocabulary import FailureGroup

if TYPE_CHECKING:
    from runtime.queue.api.aclient import AsyncClient
    from runtime.queue.api.client import Client

P = ParamSpec("P")
R = TypeVar("R")
DEFAULT_QUEUE = "default"
BAD_DATA_GROUP = FailureGroup.BAD_ARGUMENT  # a job's data that does not fit its function


class PutOptions(JobOptions, total=False):
    """A put's options (`Queue.put`'s keywords, runtime.queue.wire.JobOptions) and
    its queue, as `@job` defaults or `.options(...)`."""

    queue: str


OPTION_NAMES = frozenset(PutOptions.__optional_keys__)
JobCallable = Callable[Concatenate[JobContext, P], R]


class JobFunction(Generic[P, R]):
    """A job function with its queue and put options; see the module's docstring."""

    __wrapped__: Callable[..., R]
    __name__: str
    __qualname__: str

    def __init__(
        self,
        fn: Callable[Concatenate[JobContext, P], R],
        *,
        never_retry: type[BaseException] | Iterable[type[BaseException]] = (),
        options: PutOptions | None = None,
        client: Client | AsyncClient | None = None,
    ) -> None:
        klass = _klass_of(fn)
        self.signature = _job_signature(fn)
        functools.update_wrapper(self, fn)
        self.klass = klass
        self.never_retry: tuple[type[BaseException], ...] = _exception_types(
            never_retry or getattr(fn, "never_retry", ())
        )
        self._options: PutOptions = _checked_options(options or {}, f"@job on {self.klass}")
        self._client = client

    def __repr__(self) -> str:
        return f"<job {self.klass} queue={self.queue!r}>"

    @property
    def queue(self) -> str:
        return self._options.get("queue", DEFAULT_QUEUE)

    @property
    def defaults(self) -> PutOptions:
        """The put options this JobFunction applies (queue included when set)."""
        return PutOptions(**self._options)

    # --- running (in the worker's child) ------------------------------------------

    @overload
    def __call__(self, ctx: JobContext, /) -> R: ...
    @overload
    def __call__(self, ctx: JobContext, /, *args: P.args, **kwargs: P.kwargs) -> R: ...
    def __call__(self, ctx: JobContext, /, *args: Any, **kwargs: Any) -> R:
        """Calls the function; with the context alone, with the job's data as its
        keyword arguments (data that does not fit fails the job at once)."""
        if args:
            raise BadArgument(_positional(self.klass, len(args)))
        if not kwargs:
            kwargs = self._arguments_of(ctx)
        return self.__wrapped__(ctx, **kwargs)

    def _arguments_of(self, ctx: JobContext) -> dict[str, Any]:
        data = ctx.data if isinstance(ctx.data, dict) else {}
        try:
            self.signature.bind(ctx, **data)
        except TypeError as err:
            raise Fail(
                f"{self.klass} cannot take this job's data: {err}", group=BAD_DATA_GROUP
            ) from None
        return dict(data)

    # --- putting --------------------------------------------------------------------

    def options(self, **options: Unpack[PutOptions]) -> JobFunction[P, R]:
        """This job with more put options set (they replace the ones set before)."""
        merged: PutOptions = {**self._options, **_checked_options(options, f"{self.klass}.options")}
        other = copy.copy(self)
        other._options = merged
        return other

    def using(self, client: Client | AsyncClient) -> JobFunction[P, R]:
        """This job, put through `client` rather than the default one (`put` and
        `put_many` with a Client, `aput` and `aput_many` with an AsyncClient)."""
        other = copy.copy(self)
        other._client = client
        return other

    @property
    def client(self) -> Client:
        """The Client `put` goes through."""
        if self._client is None:
            return default_client()
        if _is_async(self._client):
            raise WrongState(f"{self.klass}: an AsyncClient puts with `await ….aput(...)`")
        return cast("Client", self._client)

    @property
    def async_client(self) -> AsyncClient:
        """The AsyncClient `aput` goes through (set with `.using(ac)`)."""
        if self._client is None or not _is_async(self._client):
            raise WrongState(
                f"{self.klass}: aput needs an AsyncClient: "
                f"`await {self.__name__}.using(ac).aput(...)`"
            )
        return cast("AsyncClient", self._client)

    def spec(self, *args: P.args, **kwargs: P.kwargs) -> JobSpec:
        """The job these arguments make, not put yet (for `Client.put_many`, `ctx.put`)."""
        if args:
            raise BadArgument(_positional(self.klass, len(args)))
        return self._spec(kwargs)

    def put(self, *args: P.args, **kwargs: P.kwargs) -> str:
        """Puts the job with these keyword arguments as its data; returns its jid (or,
        for a duplicate of a unique key, the jid of the job holding that key)."""
        if args:
            raise BadArgument(_positional(self.klass, len(args)))
        return self.client.put_many([self._spec(kwargs)])[0]

    def put_many(self, calls: Iterable[Mapping[str, Any]]) -> list[str]:
        """Puts one job per mapping of keyword arguments, all or none, in one call."""
        if "jid" in self._options:
            raise BadArgument(f"{self.klass}.put_many: one jid cannot name many jobs")
        specs = [self._spec(call) for call in calls]
        return self.client.put_many(specs) if specs else []

    async def aput(self, *args: P.args, **kwargs: P.kwargs) -> str:
        """`put` through the AsyncClient given with `.using(ac)`: checked alike."""
        if args:
            raise BadArgument(_positional(self.klass, len(args)))
        spec = self._spec(kwargs)
        return (await self.async_client.put_many([spec]))[0]

    async def aput_many(self, calls: Iterable[Mapping[str, Any]]) -> list[str]:
        """`put_many` through the AsyncClient given with `.using(ac)`."""
        if "jid" in self._options:
            raise BadArgument(f"{self.klass}.put_many: one jid cannot name many jobs")
        specs = [self._spec(call) for call in calls]
        return await self.async_client.put_many(specs) if specs else []

    def _spec(self, kwargs: Mapping[str, Any]) -> JobSpec:
        if self.klass.startswith("__main__:"):
            raise BadArgument(
                f"{self.klass} is defined in the script being run (__main__): a worker "
                "imports jobs from their module, so define it in one (e.g. myapp/jobs.py)"
            )
        if not isinstance(kwargs, Mapping):
            raise BadArgument(f"{self.klass}: arguments must be a mapping, got {kwargs!r}")
        try:
            self.signature.bind(None, **kwargs)
        except TypeError as err:
            raise BadArgument(_misfit(self.klass, err, kwargs)) from None
        options: dict[str, Any] = dict(self._options)
        queue = options.pop("queue", DEFAULT_QUEUE)
        return JobSpec.build(queue, self.klass, kwargs, **options)


@overload
def job(fn: JobCallable[P, R], /) -> JobFunction[P, R]: ...
@overload
def job(
    *,
    never_retry: type[BaseException] | Iterable[type[BaseException]] = (),
    **options: Unpack[PutOptions],
) -> Callable[[JobCallable[P, R]], JobFunction[P, R]]: ...
def job(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    never_retry: type[BaseException] | Iterable[type[BaseException]] = (),
    **options: Unpack[PutOptions],
) -> Any:
    """Makes `fn(ctx, *, ...)` a typed job: `@job` or `@job(queue=..., retries=...,
    never_retry=(ValueError,), priority=..., timeout=..., domain=...)`. The options
    are `Queue.put`'s, the defaults of every put; exceptions in `never_retry` fail
    the job at once, like `Fail`."""
    if "jid" in options:
        raise BadArgument("@job: a jid names one job; give it per put with .options(jid=...)")
    checked = _checked_options(options, "@job")

    def decorate(function: Callable[..., Any]) -> JobFunction[..., Any]:
        return JobFunction(function, never_retry=never_retry, options=checked)

    return decorate if fn is None else decorate(fn)


# --- the default client ---------------------------------------------------------------

_default: Client | None = None
_default_lock = threading.Lock()


def default_client() -> Client:
    """The client typed jobs are put with: the one set with `set_default_client`,
    else `Client()` (REDIS_URL or the config file, else the embedded Redis), made
    on first use. Inside a worker's child (CHILD_MARKER set) there is none: a job
    has no credentials, and puts its jobs through its master with ctx.put."""
    global _default  # noqa: PLW0603 - one client per process, made on first use
    with _default_lock:
        if _default is None and os.environ.get(CHILD_MARKER) == "1":
            raise WrongState(
                "a job cannot put with .put(): it holds no Redis connection; put "
                "follow-up jobs with ctx.put(job.spec(...)) or ctx.put(job, ...)"
            )
        if _default is None:
            from runtime.queue.api.client import Client  # noqa: PLC0415 - not in children

            _default = Client()
        return _default


def set_default_client(client: Client | None) -> None:
    """Puts typed jobs through `client` from now on (None: `Client()` again)."""
    global _default  # noqa: PLW0603
    with _default_lock:
        _default = client


# --- checks ---------------------------------------------------------------------------


def _is_async(client: object) -> bool:
    """Whether `client` is an AsyncClient (not imported here: it loads redis)."""
    return hasattr(client, "aclose")


def _job_signature(fn: Callable[..., Any]) -> inspect.Signature:
    """The function's signature, refused (BadArgument) when the worker could not
    call it as fn(ctx, **data)."""
    name = getattr(fn, "__qualname__", repr(fn))
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as err:
        raise BadArgument(f"@job: cannot read the arguments of {name}: {err}") from None
    params = list(signature.parameters.values())
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if not params or params[0].kind not in positional:
        raise BadArgument(f"@job: {name} must take the job context as its first argument")
    for param in params[1:]:
        if param.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.VAR_POSITIONAL):
            raise BadArgument(
                f"@job: {name} takes {param} by position only; after the context a job "
                "takes keyword arguments (its data)"
            )
    return signature


def _klass_of(fn: Callable[..., Any]) -> str:
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    origin = inspect.unwrap(fn)
    if not module or not qualname or not inspect.isfunction(origin):
        raise BadArgument(f"@job needs a function defined in a module, got {fn!r}")
    if "." in qualname:  # "<locals>" of a function, or a class's method
        raise BadArgument(
            f"@job: {qualname} must be defined at the top level of its module "
            "(a worker finds a job as module:name)"
        )
    return f"{module}:{qualname}"


def _exception_types(value: Any) -> tuple[type[BaseException], ...]:
    types = (value,) if isinstance(value, type) else tuple(value)
    for item in types:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise BadArgument(f"never_retry must name exception classes, got {item!r}")
    return types


def _checked_options(options: Mapping[str, Any], where: str) -> PutOptions:
    """The options, refused (BadArgument) when one is unknown or its value is bad:
    at decoration time, not at the first put."""
    options = {k: tuple(v) if k in ("tags", "depends") and not isinstance(v, str) else v
               for k, v in options.items()}  # fmt: skip  # a generator is read once
    unknown = sorted(set(options) - OPTION_NAMES)
    if unknown:
        raise BadArgument(
            f"{where}: unknown option {', '.join(unknown)} "
            f"(options: {', '.join(sorted(OPTION_NAMES))})"
        )
    rest = {k: v for k, v in options.items() if k != "queue"}
    JobSpec.build(options.get("queue", DEFAULT_QUEUE), "runtime.typed:check", {}, **rest)
    return cast("PutOptions", options)


def _positional(klass: str, count: int) -> str:
    return (
        f"{klass} takes keyword arguments only (they are the job's data), "
        f"got {count} positional argument{'s' if count != 1 else ''}"
    )


def _misfit(klass: str, err: TypeError, kwargs: Mapping[str, Any]) -> str:
    text = f"{klass}: {err}"
    options = sorted(set(kwargs) & OPTION_NAMES)
    if options and "unexpected keyword" in str(err):
        name = klass.rpartition(":")[2]
        shown = ", ".join(f"{o}=..." for o in options)
        text += f" (put options go through {name}.options({shown}).put(...))"
    return text
