#!/usr/bin/env python3
"""Write the images of the tiny examples (examples/tiny_experiment.toml, examples/train_tiny.toml).

Five image trees of 12x12 PNGs, seeded, so the examples run on a fresh clone without any data:

    data/id_train/<a|b|c>/*.png   8 per class   ID training images (detectors fit on them)
    data/id_test/<a|b|c>/*.png    6 per class   ID test images
    data/pool/<d|e>/*.png         8 per class   classes the model never saw: the C-OOD class pool
    data/noise/noise/*.png        6             uniform noise: a far-OOD set
    data/stripes/stripes/*.png    6             diagonal stripes: a near-OOD set

The ID classes are bars of three orientations (a: horizontal, b: vertical, c: diagonal), the pool
classes a checkerboard (d) and a disc (e), each with random jitter. The output is committed
(``examples/data``); run this only to change it:

    python scripts/make_example_data.py            # writes examples/data
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
#: split -> its class folders
LAYOUT = {"id_train": ["a", "b", "c"], "id_test": ["a", "b", "c"], "pool": ["d", "e"],
          "noise": ["noise"], "stripes": ["stripes"]}
#: images per class folder
SIZES = {"id_train": 8, "id_test": 6, "pool": 8, "noise": 6, "stripes": 6}


def pattern(kind: str, i: int, rng: np.random.Generator) -> np.ndarray:
    """A 12x12 RGB image: bars of a class-specific orientation, noise or stripes, plus jitter."""
    y, x = np.mgrid[0:12, 0:12]
    shapes = {
        "a": (y // 3) % 2, "b": (x // 3) % 2, "c": ((x + y) // 3) % 2,
        "d": (x > 5) ^ (y > 5), "e": ((x - 6) ** 2 + (y - 6) ** 2 < 16 + i % 5),
        "stripes": (x + 2 * y + i) % 4 < 2,
    }
    base = rng.random((12, 12)) if kind == "noise" else shapes[kind].astype(float)
    grey = np.clip(base * 0.8 + 0.2 * rng.random((12, 12)), 0, 1)
    return np.repeat((grey * 255).astype(np.uint8)[..., None], 3, axis=2)


def write(folder: Path) -> int:
    """Write the five trees under ``folder`` (seed 0); returns the number of images."""
    rng = np.random.default_rng(0)
    count = 0
    for split, classes in LAYOUT.items():
        for cls in classes:
            out = folder / split / cls
            out.mkdir(parents=True, exist_ok=True)
            for i in range(SIZES[split]):
                Image.fromarray(pattern(cls, i, rng)).save(out / f"{i:02d}.png")
                count += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=EXAMPLES / "data", help="the data folder")
    args = parser.parse_args()
    print(f"wrote {write(args.out)} images under {args.out}")


if __name__ == "__main__":
    main()
