"""The import graph of a package, read from its source, for the architecture test.

Every ``import`` counts, at module level and inside functions and methods, ``TYPE_CHECKING``
blocks included; so do imports written as strings: ``importlib.import_module("a.b")``,
``__import__("a.b")``, and any string constant that names a module of the package on its own,
as a dotted path or a ``"module:attribute"`` reference (the tables that name what to import
later: ``models.registry.FAMILIES``, a lazy ``__getattr__``'s table, ``resources.files(...)``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

#: the functions whose first argument is a module imported by name
IMPORTERS = frozenset({"import_module", "__import__"})
#: a string that is nothing but a dotted module path, optionally with ``:attribute``
DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?::[A-Za-z_][\w.]*)?")


def module_name(root: Path, path: Path) -> str:
    """``oodbench.run.plan`` of ``<root>/oodbench/run/plan.py`` (``__init__`` -> the package)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path, package: str) -> dict[str, Path]:
    """Every module of ``package`` under ``root`` (a ``src`` folder): name -> file."""
    return {module_name(root, p): p for p in sorted((root / package).rglob("*.py"))}


def string_imports(tree: ast.AST, tops: set[str], module: str = "",
                   known: set[str] | None = None) -> Iterator[tuple[str, int]]:
    """``(dotted module name, line)`` for each import written as a string in ``tree`` whose first
    name part is one of ``tops``: the argument of ``import_module`` / ``__import__``, and every
    other string constant that is only a dotted path (``"a.b.c"``) or ``"a.b:function"`` naming
    a module of ``known`` (any, when ``None``; ``"a.b.txt"`` is a file name, not ``a.b``),
    except one naming a package that ``module`` itself belongs to (``package_file("a.b",
    "x.toml")`` in ``a.b.c``: where its own data files lie, not a dependency)."""
    seen: set[int] = set()
    for node in ast.walk(tree):
        text = None
        if isinstance(node, ast.Call) and node.args and _callee(node.func) in IMPORTERS:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                text = arg.value
                seen.add(id(arg))
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in seen
              and "." in node.value and DOTTED.fullmatch(node.value)
              and not module.startswith(node.value + ".")
              and (known is None or node.value.partition(":")[0] in known)):
            text = node.value
        if text is not None:
            name = text.partition(":")[0]
            if name.split(".")[0] in tops:
                yield name, node.lineno


def _callee(func: ast.expr) -> str:
    """``import_module`` of ``importlib.import_module`` / ``import_module``; '' otherwise."""
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def imported(tree: ast.AST, module: str, is_package: bool, known: set[str]) -> Iterator[tuple[str, int]]:
    """``(imported module, line)`` for each import in ``tree`` of a module of ``known``, string
    imports included (:func:`string_imports`); names imported from a package (``from oodbench
    import losses``) count as the module when one of that name exists, else as the package."""
    package = module if is_package else module.rpartition(".")[0]
    for name, line in string_imports(tree, {k.split(".")[0] for k in known}, module, known):
        yield _nearest(name, known), line
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known or alias.name.split(".")[0] in {k.split(".")[0] for k in known}:
                    yield _nearest(alias.name, known), node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                full = f"{target}.{alias.name}"
                if full in known:
                    yield full, node.lineno
                elif target in known or _nearest(target, known):
                    yield _nearest(target, known), node.lineno


def _nearest(name: str, known: set[str]) -> str:
    """``name`` or its closest enclosing module among ``known`` ('' when none)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name


def import_graph(root: Path, package: str) -> dict[str, dict[str, int]]:
    """module -> {imported module of the package: first line}, self-imports left out."""
    mods = modules(root, package)
    known = set(mods)
    graph: dict[str, dict[str, int]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges: dict[str, int] = {}
        for target, line in imported(tree, name, path.name == "__init__.py", known):
            if target and target != name:
                edges.setdefault(target, line)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one member (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                members.append(w)
                if w == v:
                    break
            if len(members) > 1:
                out.append(sorted(members))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def collapse(graph: dict[str, dict[str, int]], level: int) -> dict[str, dict[str, int]]:
    """The graph between the first ``level`` + 1 name parts (``oodbench.run`` for level 1)."""
    out: dict[str, dict[str, int]] = {}
    for src, edges in graph.items():
        a = ".".join(src.split(".")[: level + 1])
        out.setdefault(a, {})
        for dst, line in edges.items():
            b = ".".join(dst.split(".")[: level + 1])
            if a != b:
                out[a].setdefault(b, line)
    return out
