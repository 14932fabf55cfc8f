"""The demo's benchmarks, shared by the demo (:mod:`oodbench.demo`) and its loss comparison
(:mod:`oodbench.demo_losses`): C-OOD on the held-out digits and the far-OOD sets."""

from __future__ import annotations

from oodbench.data.demo import KINDS

DEMO_WINDOW = 1
DEMO_LEVELS = 4
N_ID_CLASSES = 6
COOD_NAME = "C-OOD (held-out digits 6-9)"
FAR_NAME = "letters, photos, textures, noise"


def benchmark_tables(seed: int) -> str:
    """The demo's two ``[[benchmarks]]`` tables (C-OOD on the held-out digits, the far sets)."""
    groups = "\n".join(
        f'groups.{name} = {{ demo = "{name}", seed = {seed}, kind = "{kind}" }}'
        for name, kind in KINDS.items()
    )
    return f"""[[benchmarks]]
type = "cood"
name = "{COOD_NAME}"
pool = {{ demo = "pool", seed = {seed} }}
window = {DEMO_WINDOW}       # classes per severity level (the paper: 1000 of ~10,000)
n_levels = {DEMO_LEVELS}     # 4 held-out classes -> 4 levels, easiest to hardest
seed = {seed}

[[benchmarks]]
type = "custom"
name = "{FAR_NAME}"
{groups}
"""
