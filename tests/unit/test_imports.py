"""No two modules of the package import each other, directly or around a loop (lazy imports inside
functions count too: a loop means a definition lives in the wrong file)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "sago_fast"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            for target in targets:
                if target in modules and target != name and not name.startswith(f"{target}."):
                    if not path.name == "__init__.py" and not modules[target].name == "__init__.py":
                        graph[name].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_package_has_no_import_circles():
    graph = import_graph()
    assert len(graph) > 80 and sum(map(len, graph.values())) > 150  # the graph was read
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_the_check_finds_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def _trees() -> dict[Path, ast.Module]:
    return {p: ast.parse(p.read_text(encoding="utf-8")) for p in PACKAGE.rglob("*.py")}


def test_no_module_calls_another_modules_private_method():
    """A ``_``-prefixed method of a sago_fast class is called on ``self`` (or ``cls``) only: no other
    module reaches into an object's privates, the cycle an import graph cannot show."""
    trees = _trees()
    private = {
        node.name
        for tree in trees.values()
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef)
        for node in cls.body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("_") and not node.name.startswith("__")
    }
    reached = [
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {ast.unparse(node)}"
        for path, tree in trees.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr in private
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
    ]
    assert not reached


def test_no_parameter_named_model_is_typed_any():
    loose = [
        f"{path.relative_to(PACKAGE.parent)}:{arg.lineno}"
        for path, tree in _trees().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for arg in node.args.args + node.args.kwonlyargs
        if arg.arg == "model" and arg.annotation is not None and ast.unparse(arg.annotation) == "Any"
    ]
    assert not loose
