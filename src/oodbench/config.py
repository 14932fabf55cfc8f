"""Process-wide settings read from the environment.

``OODBENCH_CACHE``: where activations, downloaded files and text embeddings are cached
(default ``~/.cache/oodbench``). Nothing is ever written outside the repository except there.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The root of oodbench's on-disk cache: ``$OODBENCH_CACHE`` or ``~/.cache/oodbench``."""
    env = os.environ.get("OODBENCH_CACHE")
    root = Path(env).expanduser() if env else Path.home() / ".cache" / "oodbench"
    return root
