"""Which callables a job may name, and finding them.

A worker's MODULEs are its allow-list: a klass may live in one of them or in
their submodules. The check reads only the klass text, so a refused klass
imports nothing.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any

from runtime.errors import KlassNotAllowed, KlassNotFound


def split(klass: str) -> tuple[str, list[str]]:
    """("pkg.mod", ["func"]) from "pkg.mod:func"; the dotted form splits at the last dot."""
    if ":" in klass:
        module, _, attrs = klass.partition(":")
        return module, attrs.split(".")
    module, _, attr = klass.rpartition(".")
    return module, [attr]


def allowed(klass: str, modules: Iterable[str]) -> bool:
    module, _ = split(klass)
    return any(module == m or module.startswith(m + ".") for m in modules)


def resolve(klass: str, modules: Iterable[str]) -> Callable[..., Any]:
    """The callable named by `klass`, imported only if the allow-list permits it."""
    modules = tuple(modules)
    if not allowed(klass, modules):
        raise KlassNotAllowed(f"klass not allowed: {klass} is outside {', '.join(modules)}")
    module_name, attrs = split(klass)
    try:
        target: Any = importlib.import_module(module_name)
        for attr in attrs:
            target = getattr(target, attr)
    except (ImportError, AttributeError) as err:
        raise KlassNotFound(f"klass not found: {klass}: {err}") from err
    if not callable(target):
        raise KlassNotFound(f"klass not found: {klass} is not callable")
    return target  # type: ignore[no-any-return]
