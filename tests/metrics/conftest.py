"""Keep Hypothesis's files (its constants cache, written while pytest collects) in a temporary
folder instead of ``.hypothesis/`` in the working tree; the folder is removed at exit."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from hypothesis.configuration import set_hypothesis_home_dir

_HOME = Path(tempfile.mkdtemp(prefix="oodbench-hypothesis-"))
set_hypothesis_home_dir(_HOME)
atexit.register(shutil.rmtree, _HOME, ignore_errors=True)
