"""The package's imports run one way: no module of runtime reaches itself again
through its imports, counting those made only for type checking and those made
inside functions (a circle there is one still, only deferred)."""

from __future__ import annotations

import ast
from pathlib import Path

import runtime

ROOT = Path(runtime.__file__).parent


def _module_of(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_of(p): p for p in ROOT.rglob("*.py")}


def _imports(path: Path, module: str, known: set[str]) -> set[str]:
    """The runtime modules `module` imports (a name imported from a package counts
    as the submodule when there is one by that name)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
    return {name for name in found if name in known and name != module}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(path, name, known) for name, path in modules.items()}


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of the graph (its modules in order), None if there is none."""
    done: set[str] = set()
    for start in sorted(graph):
        path: list[str] = []
        on_path: set[str] = set()
        stack = [(start, iter(sorted(graph[start])))]
        if start in done:
            continue
        path.append(start)
        on_path.add(start)
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                path.pop()
                on_path.discard(node)
                done.add(node)
            elif child in on_path:
                return [*path[path.index(child) :], child]
            elif child not in done:
                stack.append((child, iter(sorted(graph[child]))))
                path.append(child)
                on_path.add(child)
    return None


def test_the_finder_sees_a_circle_when_there_is_one() -> None:
    assert _circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _circle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_package_imports_have_no_circle() -> None:
    graph = _graph()
    assert "runtime.queue.ops" in graph["runtime.queue.api.client"], "the graph is read"
    assert _circle(graph) is None


def test_the_sans_io_decoders_know_no_client() -> None:
    graph = _graph()
    decoders = [m for m in graph if m.startswith("runtime.queue.ops.")]
    assert "runtime.queue.ops.leasing" in decoders, "the graph is read"
    for module in ("runtime.queue.ops", *decoders, "runtime.queue.job", "runtime.queue.leases"):
        assert "runtime.queue.api.client" not in graph[module], module


def _in_api(module: str) -> bool:
    return module == "runtime.queue.api" or module.startswith("runtime.queue.api.")


def test_the_redis_boundary_imports_nothing_of_the_application_api() -> None:
    """runtime/queue/ is the Redis boundary and runtime/queue/api/ the API an
    application holds (docs/design.md, "runtime/queue/: two sides"): the API
    drives the boundary, never the other way round."""
    graph = _graph()
    boundary = [m for m in graph if m.startswith("runtime.queue.") and not _in_api(m)]
    assert "runtime.queue.scripts" in boundary and "runtime.queue.api.client" in graph
    assert any(_in_api(m) for m in graph["runtime.queue.api.client"]), "the graph is read"
    for module in boundary:
        assert not [m for m in graph[module] if _in_api(m)], module
