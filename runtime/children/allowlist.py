"""Which callables a job may name, and finding them.

A worker's MODULEs are its allow-list. A klass names one callable in one of
them or in their submodules: `pkg.mod:func` or `pkg.mod.func`, exactly one name
after the module, never a walk through attributes (`pkg.mod:os.system` is
refused). The module part is checked on the text alone, so a klass outside the
allow-list imports nothing.

The name must be *defined* in that module, not imported into it: a function
(a lambda assigned at module level counts) or a class whose `__module__` is the
module, or a callable a decorator made from such a function (found through
`__wrapped__`, as `functools.wraps` leaves it). `from os import system` in a job
module does not make `pkg.mod:system` runnable; neither does an instance of a
class (`runner = Runner()`) unless a decorator wrapped a function of the module
in it. Names are read from the module's own namespace, so a module-level
`__getattr__` is never asked.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import traceback
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

from runtime.errors import KlassNotAllowed, KlassNotFound

NAME = r"[A-Za-z_][A-Za-z0-9_]*"
MODULE_RE = re.compile(rf"^{NAME}(?:\.{NAME})*$")
ATTRIBUTE_RE = re.compile(rf"^{NAME}$")


def split(klass: str) -> tuple[str, str]:
    """("pkg.mod", "func") from "pkg.mod:func"; the dotted form splits at the last dot.
    The attribute may be anything here (`allowed` checks it is one plain name)."""
    if ":" in klass:
        module, _, attr = klass.partition(":")
        return module, attr
    module, _, attr = klass.rpartition(".")
    return module, attr


def refusal(klass: str, modules: Iterable[str]) -> str | None:
    """Why `klass` may not even be imported, or None when its text is acceptable."""
    module, attr = split(klass)
    if not MODULE_RE.match(module):
        return f"klass not allowed: {klass!r} does not name a module"
    if not ATTRIBUTE_RE.match(attr):
        return f"klass not allowed: {klass!r} must name one callable of its module, no attributes"
    modules = tuple(modules)
    if not any(module == m or module.startswith(m + ".") for m in modules):
        return f"klass not allowed: {klass} is outside {', '.join(modules)}"
    return None


def allowed(klass: str, modules: Iterable[str]) -> bool:
    return refusal(klass, modules) is None


def resolve(klass: str, modules: Iterable[str]) -> Callable[..., Any]:
    """The callable named by `klass`, imported only if the allow-list permits it.
    KlassNotAllowed: refused (nothing outside the allowed module imported);
    KlassNotFound: allowed, but the module does not import or has no such name."""
    why = refusal(klass, modules)
    if why is not None:
        raise KlassNotAllowed(why)
    module_name, attr = split(klass)
    module = _import(klass, module_name)
    namespace = vars(module)
    if attr not in namespace:
        raise KlassNotFound(f"klass not found: {klass}: {module_name} has no {attr!r}")
    target = namespace[attr]
    if not defined_in(target, module.__name__):
        raise KlassNotAllowed(
            f"klass not allowed: {klass} is not a function or class defined in {module_name}"
        )
    if not callable(target):  # a wrapper object without __call__
        raise KlassNotFound(f"klass not found: {klass} is not callable")
    return target  # type: ignore[no-any-return]


def defined_in(target: object, module_name: str) -> bool:
    """Whether `target` is a function or class of `module_name` (or a decorator's
    wrapper around one)."""
    try:
        origin = inspect.unwrap(target)  # type: ignore[arg-type]
    except ValueError:  # a cycle of __wrapped__
        return False
    if not (inspect.isfunction(origin) or inspect.isclass(origin)):
        return False
    return getattr(origin, "__module__", None) == module_name


def _import(klass: str, module_name: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except Exception as err:  # any error while a job module imports is that klass not found
        raise KlassNotFound(f"klass not found: {klass}: {where(err)}") from err


def where(err: BaseException) -> str:
    """The error with the file and line it came from, "NameError: ... (path, line 3)":
    the traceback's last frame outside the import machinery (none when the module
    itself is missing)."""
    if isinstance(err, SyntaxError) and err.filename:
        return f"{type(err).__name__}: {err.msg} ({err.filename}, line {err.lineno})"
    text = f"{type(err).__name__}: {err}"
    frames = [f for f in traceback.extract_tb(err.__traceback__) if not _machinery(f.filename)]
    return f"{text} ({frames[-1].filename}, line {frames[-1].lineno})" if frames else text


_MACHINERY = (os.path.dirname(importlib.__file__) + os.sep, __file__)


def _machinery(filename: str) -> bool:
    return filename.startswith("<frozen") or filename.startswith(_MACHINERY)
