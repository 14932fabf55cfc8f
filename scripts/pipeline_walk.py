"""The walk of one experiment through ``oodbench run``: which modules the experiment file's path,
and what is made from it, passes through, and how often the walk turns back.

    python scripts/pipeline_walk.py                  # the tiny example, copied to a temporary folder
    python scripts/pipeline_walk.py --show           # and every step of the walk

Method (dynamic, ``sys.setprofile``): ``oodbench run <file> --no-progress`` runs under a
profiler. A call into a function of ``oodbench`` is *on the walk* when one of its arguments is
the experiment file's path (any object equal to it once resolved) or an object that an earlier
call on the walk returned or made (a local variable), when it is an object of the pipeline (a class of ``oodbench.run``: the
``Experiment``, the ``Plan``, the ``PreparedRun``) or the ``ResultsTable`` (property reads are
not steps). The walk's position is the module of the innermost function on the walk
that is running. A call path (the chain of module and function from the top) repeated by a
loop (over cells, sources) is walked once. Counted:

* **stays**: the maximal stretches of the walk in one module (moving to another module and back
  is two stays of the first);
* **rooms**: the modules the walk visits;
* **returns**: moves back to the calling module when a function on the walk returns;
* **climbs back**: calls on the walk from a module into one of a higher layer of
  ``docs/architecture.md`` (a lower layer calling back up, e.g. through a callback).

Also prints how many times ``oodbench.detectors.create`` ran, and the number of
``oodbench`` modules that importing the experiment schema loads.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def layer_ranks(doc: Path) -> dict[str, int]:
    """``{"oodbench.run": 6, ...}``: the line of each package in the ``layers`` block, top = 0."""
    match = re.search(r"```layers\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)
    assert match, f"{doc} has no layers block"
    lines = [line for line in match.group(1).splitlines() if line.strip()]
    return {p.strip(): i for i, line in enumerate(lines) for p in line.split("|")}


class Walk:
    """The profiler: records the walk's positions as calls and returns move it."""

    def __init__(self, path: Path, package_dir: Path):
        self.path = path.resolve()
        self.package_dir = str(package_dir)
        self.tracked: dict[int, Any] = {}  # id -> object made from the path (kept alive)
        self.on_walk: dict[int, str] = {}  # frame id -> module
        self.stack: list[str] = []  # modules of the frames on the walk, innermost last
        self.steps: list[tuple[str, str, str]] = []  # (event, module, function)
        self.creates = 0

    def _module(self, frame: FrameType) -> str | None:
        file = frame.f_code.co_filename
        if not file.startswith(self.package_dir):
            return None
        return str(frame.f_globals.get("__name__", ""))

    def _carries(self, value: Any) -> bool:
        if id(value) in self.tracked and self.tracked[id(value)] is value:
            return True
        if isinstance(value, (str, Path)) and str(value).endswith(".toml"):
            try:
                return Path(value).resolve() == self.path
            except (OSError, ValueError):
                return False
        return False

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            module = self._module(frame)
            if module is None:
                return
            if module == "oodbench.detectors.base" and frame.f_code.co_name == "create":
                self.creates += 1
            code = frame.f_code
            names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
            if _is_property(frame):  # reading an attribute is not a step of the walk
                return
            if any(self._carries(frame.f_locals.get(n)) for n in names):
                self.on_walk[id(frame)] = module
                self.stack.append(module)
                self.steps.append(("call", module, code.co_name))
        elif event == "return" and id(frame) in self.on_walk:
            module = self.on_walk.pop(id(frame))
            self.stack.pop()
            for value in [arg, *frame.f_locals.values()]:  # what it returned or made
                if carrier(value):
                    self.tracked[id(value)] = value
            self.steps.append(("return", self.stack[-1] if self.stack else "", module))

    def once(self) -> list[tuple[str, str, str]]:
        """The steps with every repetition of a call path left out (a loop over cells, or over
        sources, walks its body once): a call whose chain of (module, function) from the top was
        seen before is dropped with everything under it."""
        out: list[tuple[str, str, str]] = []
        chain: list[tuple[str, str]] = []
        seen: set[tuple[tuple[str, str], ...]] = set()
        skipping = 0  # depth inside a repeated call
        for event, module, name in self.steps:
            if event == "call":
                chain.append((module, name))
                if skipping or tuple(chain) in seen:
                    skipping += 1
                    continue
                seen.add(tuple(chain))
            else:
                chain.pop()
                if skipping:
                    skipping -= 1
                    continue
            out.append((event, module, name))
        return out

    def counts(self, ranks: dict[str, int]) -> dict[str, int]:
        """stays, rooms, returns and climbs back of the walk, each call path once."""
        position: list[str] = []
        stays = returns = climbs = 0
        rooms: set[str] = set()
        for event, module, _ in self.once():
            here = position[-1] if position else None
            if event == "call":
                if module != here:
                    stays += 1
                    rooms.add(module)
                    if here is not None and _rank(module, ranks) < _rank(here, ranks):
                        climbs += 1
                position.append(module)
            else:
                position.pop()
                back = position[-1] if position else None
                if back is not None and back != here:
                    stays += 1
                    returns += 1
        return {"stays": stays, "rooms": len(rooms), "returns": returns, "climbs back": climbs}


def carrier(value: Any) -> bool:
    """Whether ``value`` is made from the experiment file and carries it on: an object of the
    pipeline (a class of ``oodbench.run``: the experiment, its plan, a prepared run) or its
    results table."""
    kind = type(value)
    return kind.__module__.startswith("oodbench.run") or kind.__name__ == "ResultsTable"


def _is_property(frame: FrameType) -> bool:
    """Whether ``frame`` runs a property's getter (``exp.name``)."""
    args = frame.f_code.co_varnames[: frame.f_code.co_argcount]
    if not args or args[0] != "self":
        return False
    owner = type(frame.f_locals.get("self"))
    return isinstance(getattr(owner, frame.f_code.co_name, None), property)


def _rank(module: str, ranks: dict[str, int]) -> int:
    """The layer of ``module`` (its ``oodbench.<package>``; the package ``__init__``: ``oodbench``)."""
    parts = module.split(".")
    return ranks.get(".".join(parts[:2]), ranks.get(parts[0], len(ranks)))


def schema_import_count() -> tuple[int, list[str]]:
    """How many ``oodbench`` modules importing the experiment schema loads, in a fresh process,
    and which subpackages they belong to."""
    code = ("import sys, importlib\n"
            "name = 'oodbench.run.spec'\n"
            "try:\n    importlib.import_module(name)\n"
            "except ImportError:\n    name = 'oodbench.run.experiment'; importlib.import_module(name)\n"
            "mods = sorted(m for m in sys.modules if m == 'oodbench' or m.startswith('oodbench.'))\n"
            "print(name, len(mods)); print(' '.join(sorted({'.'.join(m.split('.')[:2]) for m in mods})))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    first, packages = out.stdout.splitlines()[:2]
    return int(first.split()[1]), [first.split()[0], *packages.split()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show", action="store_true", help="print every step of the walk")
    args = parser.parse_args()
    import oodbench
    from oodbench.cli.main import main as cli

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        shutil.copytree(REPO / "examples" / "data", folder / "data")
        toml = folder / "tiny_experiment.toml"
        shutil.copy(REPO / "examples" / "tiny_experiment.toml", toml)
        walk = Walk(toml, Path(oodbench.__file__).parent)
        sys.setprofile(walk)
        try:
            cli.main(["run", str(toml), "--no-progress"], standalone_mode=False)
        finally:
            sys.setprofile(None)
    if args.show:
        depth = 0
        for event, module, name in walk.once():
            if event == "call":
                print(f"{'  ' * depth}-> {module}.{name}")
                depth += 1
            else:
                depth -= 1
    counts = walk.counts(layer_ranks(REPO / "docs" / "architecture.md"))
    print("walk of oodbench run (tiny example): "
          + ", ".join(f"{v} {k}" for k, v in counts.items()))
    print(f"detectors.create calls during the run: {walk.creates}")
    n, (name, *packages) = schema_import_count()
    print(f"importing {name} loads {n} oodbench modules ({', '.join(packages)})")


if __name__ == "__main__":
    main()
