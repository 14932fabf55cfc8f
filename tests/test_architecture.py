"""The layer order of docs/architecture.md, checked on the package's import graph.

Every import counts: module level, inside functions and methods, under ``TYPE_CHECKING``, and
imports written as strings (``importlib.import_module("...")``, ``__import__("...")``, and the
``"module"`` / ``"module:function"`` strings of tables that import later, such as
``models.registry.FAMILIES``, the CLI's sub-commands and lazy ``__getattr__`` tables; see
``tests/_imports.py``). A module may import from its own layer's package and from any layer
below; never from a layer above, never from another package of its own layer, and no two modules
may import each other, directly or through others (no cycle, at the level of modules and of
subpackages).

Outside the package, the repository's top-level script folders, ``speed/`` (speed benchmarks)
and ``studies/`` (research studies), and ``tests/`` never import each other, in either
direction: reference oracles live in ``tests/oracles/``, and a test of a script loads that file
by path (``tests/_scripts.py``).
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from tests._imports import collapse, cycles, import_graph, string_imports
from tests.conftest import REPO

DOC = REPO / "docs" / "architecture.md"


def read_layers(doc: Path) -> list[list[str]]:
    """The ```` ```layers ```` block of the document: one line per layer, top first; packages of
    one layer are separated by ``|`` (they may not import each other)."""
    match = re.search(r"```layers\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)
    assert match, f"{doc} has no ```layers block"
    return [[p.strip() for p in line.split("|")] for line in match.group(1).splitlines()
            if line.strip()]


def violations(root: Path, package: str, layers: list[list[str]]) -> list[str]:
    """Every upward import, import inside one layer, unlisted package and cycle of ``package``."""
    graph = import_graph(root, package)
    rank = {name: i for i, layer in enumerate(layers) for name in layer}
    top = collapse(graph, 1)
    problems = [f"{name} is in no layer of the architecture document"
                for name in sorted(top) if name not in rank]
    for module, edges in sorted(graph.items()):
        a = ".".join(module.split(".")[:2])
        for target, line in sorted(edges.items()):
            b = ".".join(target.split(".")[:2])
            if a == b or a not in rank or b not in rank:
                continue
            if rank[b] < rank[a]:
                problems.append(f"{module} (line {line}) imports {target}: upward, from a layer "
                                f"above ({b} over {a})")
            elif rank[b] == rank[a]:
                problems.append(f"{module} (line {line}) imports {target}: {a} and {b} share a "
                                "layer and must stay independent")
    for cycle in cycles(graph):
        problems.append(f"import cycle between modules: {' -> '.join(cycle)}")
    for cycle in cycles(top):
        problems.append(f"import cycle between subpackages: {' -> '.join(cycle)}")
    return problems


def test_the_package_follows_the_layers_of_the_architecture_document():
    assert violations(REPO / "src", "oodbench", read_layers(DOC)) == []


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return tmp_path


LAYERS = [["pkg"], ["pkg.high"], ["pkg.mid_a", "pkg.mid_b"], ["pkg.low"]]
CLEAN = {"__init__.py": "", "high/__init__.py": "from pkg.mid_a import x\n",
         "mid_a/__init__.py": "from pkg.low import base\nx = 1\n", "mid_b.py": "import pkg.low\n",
         "low/__init__.py": "", "low/base.py": "from . import other\n", "low/other.py": ""}


def test_a_clean_tree_passes(tmp_path):
    assert violations(_package(tmp_path, CLEAN), "pkg", LAYERS) == []


@pytest.mark.parametrize("change, expected", [
    ({"low/other.py": "def f():\n    from pkg.high import y\n"},  # hidden in a function
     ["pkg.low.other (line 2) imports pkg.high: upward", "import cycle between modules",
      "import cycle between subpackages: pkg.high -> pkg.low -> pkg.mid_a"]),
    ({"low/other.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.mid_b\n"},
     ["pkg.low.other (line 3) imports pkg.mid_b: upward",
      "import cycle between subpackages: pkg.low -> pkg.mid_b"]),
    ({"mid_b.py": "from pkg.mid_a import x\n"}, ["pkg.mid_b (line 1) imports pkg.mid_a: pkg.mid_b "
                                                  "and pkg.mid_a share a layer"]),
    ({"low/other.py": "from pkg.low import base\n"},  # a cycle inside one subpackage
     ["import cycle between modules: pkg.low.base -> pkg.low.other"]),
    ({"new.py": "import pkg.low\n"}, ["pkg.new is in no layer"]),
    # imports written as strings
    ({"low/other.py": "import importlib\ndef f():\n    return importlib.import_module('pkg.mid_a')\n"},
     ["pkg.low.other (line 3) imports pkg.mid_a: upward", "import cycle between modules",
      "import cycle between subpackages: pkg.low -> pkg.mid_a"]),
    ({"low/other.py": "def f():\n    return __import__('pkg.mid_b')\n"},
     ["pkg.low.other (line 2) imports pkg.mid_b: upward",
      "import cycle between subpackages: pkg.low -> pkg.mid_b"]),
    ({"low/other.py": "TABLE = {'x': ('pkg.mid_b:load', 'a description')}\n"},  # "module:function"
     ["pkg.low.other (line 1) imports pkg.mid_b: upward",
      "import cycle between subpackages: pkg.low -> pkg.mid_b"]),
    ({"mid_b.py": "LAZY = {'x': ('pkg.mid_a', 'x')}\n"},  # a dotted-module table
     ["pkg.mid_b (line 1) imports pkg.mid_a: pkg.mid_b and pkg.mid_a share a layer"]),
])
def test_the_architecture_test_catches_each_kind_of_violation(tmp_path, change, expected):
    found = violations(_package(tmp_path, {**CLEAN, **change}), "pkg", LAYERS)
    assert len(found) == len(expected), found
    for text, problem in zip(expected, found):
        assert problem.startswith(text) or text in problem, (text, problem)


def test_strings_that_are_not_imports_are_left_alone():
    """Prose, a file name, a package's own data anchor and a non-package name are not imports;
    a string naming a module of the package is, wherever it stands."""
    import ast

    tree = ast.parse(textwrap.dedent('''
        """See pkg.high for more."""
        package_file("pkg.low", "x.toml")
        open("pkg.high.txt")
        NAMES = ["numpy.linalg", "pkg high"]
        FAMILY = ("pkg.high.models:load", "pkg.mid_a")
    '''))
    known = {"pkg", "pkg.high", "pkg.high.models", "pkg.low", "pkg.low.other", "pkg.mid_a"}
    found = list(string_imports(tree, {"pkg"}, module="pkg.low.other", known=known))
    assert found == [("pkg.high.models", 6), ("pkg.mid_a", 6)], found


def _copy_with(tmp_path: Path, addition: str) -> Path:
    import shutil

    shutil.copytree(REPO / "src" / "oodbench", tmp_path / "oodbench")
    metrics = tmp_path / "oodbench" / "metrics" / "ood.py"
    metrics.write_text(metrics.read_text(encoding="utf-8") + addition, encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("addition", [
    "\n\ndef _report():\n    from oodbench.results import report\n",
    "\n\ndef _report():\n    import importlib\n\n    return importlib.import_module(\"oodbench.results.report\")\n",
    "\n\ndef _report():\n    return __import__(\"oodbench.results.report\")\n",
    "\n\n_REPORTS = {\"html\": \"oodbench.results.report:write_report\"}\n",
], ids=["import", "import_module", "__import__", "module:function table"])
def test_the_real_layers_catch_an_upward_import_added_to_the_package(tmp_path, addition):
    """The same check on a copy of the package with one upward import added to
    ``metrics/ood.py``, written as a statement or as a string."""
    found = violations(_copy_with(tmp_path, addition), "oodbench", read_layers(DOC))
    assert any(p.startswith("oodbench.metrics.ood") and "upward" in p
               and "oodbench.results" in p for p in found), found
    assert any("cycle between subpackages" in p for p in found), found


# -- speed/, studies/ and tests/ ---------------------------------------------------------------
#: the top-level script folders: speed benchmarks and studies (none named like a package of oodbench)
SCRIPT_TREES = ("speed", "studies")


def cross_imports(root: Path) -> list[str]:
    """Every import (statement or string) of ``tests`` from ``root/speed`` and ``root/studies``,
    and every import from ``root/tests`` of either folder, by its name or by the module name of
    one of its scripts (a script imports a sibling as ``import loss_table``; a test loads a script
    by path instead). ``oodbench.benchmarks`` and ``tests.benchmarks`` are other packages."""
    import ast

    scripts = {p.stem for tree in SCRIPT_TREES for p in (root / tree).glob("*.py")}
    folders = " or ".join(f"{tree}/" for tree in SCRIPT_TREES)
    #: tree -> (top names its import statements may not use, the same for strings, why)
    forbidden = {**{tree: ({"tests"}, {"tests"}, f"{tree}/ must not import tests/")
                    for tree in SCRIPT_TREES},
                 "tests": (set(SCRIPT_TREES) | scripts, set(SCRIPT_TREES),
                           f"tests/ must not import {folders} (load a script by path: "
                           "tests/_scripts.py)")}
    problems = []
    for tree_name, (statements, strings, why) in forbidden.items():
        for path in sorted((root / tree_name).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            names = [(a.name, n.lineno) for n in ast.walk(tree) if isinstance(n, ast.Import)
                     for a in n.names]
            names += [(n.module or "", n.lineno) for n in ast.walk(tree)
                      if isinstance(n, ast.ImportFrom) and not n.level]
            names = [(name, line) for name, line in names if name.split(".")[0] in statements]
            # strings: only the folder names ("loss_table.json" is a file, not a module)
            names += list(string_imports(tree, strings))
            for name, line in names:
                problems.append(f"{path.relative_to(root)} (line {line}) imports {name}: {why}")
    return problems


def test_scripts_and_tests_do_not_import_each_other():
    assert cross_imports(REPO) == []


@pytest.mark.parametrize("files, expected", [
    ({"speed/parity.py": "from tests.detectors.conftest import make_activations\n"},
     ["speed/parity.py (line 1) imports tests.detectors.conftest"]),
    ({"studies/study.py": "def main():\n    import tests.oracles.real_data\n"},
     ["studies/study.py (line 2) imports tests.oracles.real_data"]),
    ({"tests/test_x.py": "def test():\n    from studies import protocol_reference\n"},
     ["tests/test_x.py (line 2) imports studies"]),
    ({"tests/test_y.py": "import importlib\nref = importlib.import_module('speed.ref')\n"},
     ["tests/test_y.py (line 2) imports speed.ref"]),
    ({"studies/loss_table.py": "ID = 6\n",
      "tests/test_w.py": "import sys\nsys.path.insert(0, 'studies')\nfrom loss_table import ID\n"},
     ["tests/test_w.py (line 3) imports loss_table"]),
    ({"tests/test_z.py": "from oodbench import benchmarks\nfrom tests.benchmarks import x\n"
                         "name = 'loss_table.json'\n",
      "studies/loss_table.py": "ID = 6\n",
      "studies/b.py": "from oodbench.benchmarks import base\nimport loss_table\n",
      "speed/c.py": "import loss_table\nfrom bench_detectors import make_acts\n"}, []),
])
def test_the_tree_check_catches_each_direction(tmp_path, files, expected):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    for tree in (*SCRIPT_TREES, "tests"):
        (tmp_path / tree).mkdir(exist_ok=True)
    found = cross_imports(tmp_path)
    assert len(found) == len(expected), found
    for text, problem in zip(expected, found):
        assert problem.startswith(text), (text, problem)


#: the longest a source file may grow before it is split by concern
MAX_LINES = 700


def test_no_source_file_is_over_the_line_limit():
    long = {str(p.relative_to(REPO)): n for p in sorted((REPO / "src").rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}, f"split these by concern: {long}"
