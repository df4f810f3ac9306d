"""The allow-list: a klass names one function or class defined in an allowed
module; nothing else is imported, no attribute is walked, and an import error
keeps the file and line it came from."""

from __future__ import annotations

import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.children import allowlist
from runtime.errors import KlassNotAllowed, KlassNotFound

JOBS = '''\
import functools
import os
import subprocess
from os import system
from subprocess import Popen


def run(job):
    return "run"


async def run_async(job):
    return "async"


class Task:
    def __init__(self, job):
        self.job = job
    def __call__(self, job):
        return "instance"


def _decorate(fn):
    @functools.wraps(fn)
    def wrapper(job):
        return fn(job)
    return wrapper


@_decorate
def decorated(job):
    return "decorated"


class Wrapped:
    """What a job decorator may return: an object wrapping a function of this module."""
    def __init__(self, fn):
        functools.update_wrapper(self, fn)
        self.fn = fn
    def __call__(self, job):
        return self.fn(job)


def _plain(job):
    return "wrapped"


wrapped = Wrapped(_plain)
uncallable = functools.update_wrapper(type("Box", (), {})(), _plain)
lambda_job = lambda job: "lambda"  # noqa: E731
instance = Task(None)
partial = functools.partial(run)
not_callable = 3
borrowed = functools.wraps(os.getcwd)(lambda job: 1)


def __getattr__(name):
    return system
'''


@pytest.fixture
def package(tmp_path: Path) -> Iterator[str]:
    """A fresh package: `jobs` (allowed), `jobs.sub`, and modules that leave a mark."""
    name = f"rt_allow_{uuid.uuid4().hex[:8]}"
    root = tmp_path / name
    (root / "jobs").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "jobs" / "__init__.py").write_text(JOBS)
    (root / "jobs" / "sub.py").write_text("def run(job):\n    return 'sub'\n")
    marker = tmp_path / "imported"
    (root / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('x')\ndef run(job): pass\n")
    (root / "jobsx.py").write_text(f"open({str(marker)!r}, 'w').write('x')\ndef run(job): pass\n")
    (root / "broken.py").write_text("import os\n\nvalue = undefined_name + 1\n")
    (root / "syntax.py").write_text("def run(job):\n    return (\n\ndef other(): pass\n")
    (root / "deep.py").write_text(
        textwrap.dedent(f"""\
        from {name} import helper
        def run(job): pass
    """)
    )
    (root / "helper.py").write_text("x = 1\n\nraise RuntimeError('helper failed')\n")
    sys.path.insert(0, str(tmp_path))
    yield name
    sys.path.remove(str(tmp_path))
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]


def test_a_function_class_or_lambda_defined_in_an_allowed_module_resolves(package: str) -> None:
    allowed = [f"{package}.jobs"]
    assert allowlist.resolve(f"{package}.jobs:run", allowed)(None) == "run"
    assert allowlist.resolve(f"{package}.jobs.run", allowed)(None) == "run"
    assert allowlist.resolve(f"{package}.jobs:run_async", allowed).__name__ == "run_async"
    assert isinstance(allowlist.resolve(f"{package}.jobs:Task", allowed)(1), object)
    assert allowlist.resolve(f"{package}.jobs:lambda_job", allowed)(None) == "lambda"
    assert allowlist.resolve(f"{package}.jobs.sub:run", allowed)(None) == "sub"


def test_a_decorated_function_of_the_module_resolves_through_its_wrapper(package: str) -> None:
    allowed = [f"{package}.jobs"]
    assert allowlist.resolve(f"{package}.jobs:decorated", allowed)(None) == "decorated"
    assert allowlist.resolve(f"{package}.jobs:wrapped", allowed)(None) == "wrapped"
    with pytest.raises(KlassNotFound, match="is not callable"):
        allowlist.resolve(f"{package}.jobs:uncallable", allowed)


@pytest.mark.parametrize(
    "attribute",
    ["os.system", "subprocess.Popen", "run.__globals__", "Task.__init__", "", "1run", "run()"],
)
def test_a_klass_that_walks_attributes_is_refused(package: str, attribute: str) -> None:
    with pytest.raises(KlassNotAllowed, match="one callable of its module"):
        allowlist.resolve(f"{package}.jobs:{attribute}", [f"{package}.jobs"])


@pytest.mark.parametrize(
    "name",
    ["system", "Popen", "instance", "partial", "borrowed", "functools", "os", "not_callable"],
)
def test_a_name_the_module_imported_or_built_is_refused(package: str, name: str) -> None:
    with pytest.raises(KlassNotAllowed, match="not a function or class defined in"):
        allowlist.resolve(f"{package}.jobs:{name}", [f"{package}.jobs"])


def test_a_module_getattr_is_never_asked(package: str) -> None:
    with pytest.raises(KlassNotFound, match="has no 'anything'"):
        allowlist.resolve(f"{package}.jobs:anything", [f"{package}.jobs"])


def test_a_refused_klass_imports_nothing(package: str, tmp_path: Path) -> None:
    allowed = [f"{package}.jobs"]
    for klass in [
        f"{package}.evil:run",
        f"{package}.jobsx:run",
        f"{package}.jobs:evil.run",
        f"{package}:evil.run",
        "os:system",
        "os.system",
        "..evil:run",
    ]:
        with pytest.raises(KlassNotAllowed):
            allowlist.resolve(klass, allowed)
    assert not (tmp_path / "imported").exists()
    assert f"{package}.evil" not in sys.modules and f"{package}.jobsx" not in sys.modules
    assert f"{package}.jobs" not in sys.modules, "refused on the text: not even the allowed module"


def test_a_missing_name_or_module_is_not_found(package: str) -> None:
    allowed = [f"{package}.jobs"]
    with pytest.raises(KlassNotFound, match="has no 'missing'"):
        allowlist.resolve(f"{package}.jobs:missing", allowed)
    with pytest.raises(KlassNotFound, match="No module named") as missing:
        allowlist.resolve(f"{package}.jobs.nothing:run", allowed)
    assert "line" not in str(missing.value), "no machinery frame given as the place"


def test_an_import_error_keeps_the_file_and_line_of_the_job_module(package: str) -> None:
    with pytest.raises(KlassNotFound) as raised:
        allowlist.resolve(f"{package}.broken:run", [package])
    assert "NameError: name 'undefined_name' is not defined" in str(raised.value)
    assert str(raised.value).endswith(f"{package}/broken.py, line 3)")


def test_an_error_in_a_module_the_job_module_imports_names_that_module(package: str) -> None:
    with pytest.raises(KlassNotFound) as raised:
        allowlist.resolve(f"{package}.deep:run", [package])
    assert "RuntimeError: helper failed" in str(raised.value)
    assert str(raised.value).endswith(f"{package}/helper.py, line 3)")


def test_a_syntax_error_keeps_the_file_and_line(package: str) -> None:
    with pytest.raises(KlassNotFound) as raised:
        allowlist.resolve(f"{package}.syntax:run", [package])
    assert "SyntaxError" in str(raised.value)
    assert f"{package}/syntax.py, line " in str(raised.value)
