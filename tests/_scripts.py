"""Load a script of the repository's ``speed/`` or ``studies/`` folder by its file path, to test
the script.

Nothing under ``tests/`` imports from ``speed/`` or ``studies/`` (``tests/test_architecture.py``):
shared code does not live there. A test *of* a script (its bookkeeping, its plan) loads that
file as the script runs, under a private module name; the loader puts nothing on ``sys.path``
(a script that imports a sibling puts its own folder there, as it does when it runs).
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.conftest import REPO


def load_script(path: str) -> ModuleType:
    """The module of ``REPO/path`` (e.g. ``"studies/loss_table.py"``), executed once per
    session (registered as ``_script_<stem>``: dataclasses look their module up by name)."""
    file = REPO / path
    name = f"_script_{file.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None and spec.loader is not None, file
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
