#!/usr/bin/env python3
"""Write the training-regime tags of every model in the published C-OOD results.

Reads the model names of the bundled ``all_paper_results.csv`` (Galil et al., ICLR 2023) and
tags each with the rules of ``oodbench.results.model_tags.TAG_RULES`` (timm's pretrained tags:
ImageNet-21k pre-training, distillation, Noisy Student, semi/weakly supervised, CLIP,
adversarial, SAM, ...), and pairs each distilled model with the same architecture trained
without distillation where one is published (the name rule plus ``EXPLICIT_PAIRS``). Both
outputs are committed so that a reviewer can read every model's tags and every pair:

    python scripts/make_cood_model_tags.py   # writes src/oodbench/results/_data/cood_model_tags.csv
                                             # and cood_distillation_pairs.csv
"""

from __future__ import annotations

import argparse
from pathlib import Path

from oodbench.results import paper
from oodbench.results.model_tags import PAIRS_FILE, TAGS_FILE, distillation_pairs, tag_table

DATA = Path(__file__).resolve().parents[1] / "src" / "oodbench" / "results" / "_data"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DATA, help="folder of the two tables")
    args = parser.parse_args()
    names = set(paper.load()["model"])
    table = tag_table(names)
    table.to_csv(args.out / TAGS_FILE, index=False, lineterminator="\n")
    counts = table["tags"].str.split(";").explode().value_counts()
    print(f"wrote {args.out / TAGS_FILE}: {len(table)} models")
    print(counts[counts.index != ""].to_string())
    pairs = distillation_pairs(names)
    pairs.to_csv(args.out / PAIRS_FILE, index=False, lineterminator="\n")
    print(f"wrote {args.out / PAIRS_FILE}: {len(pairs)} distilled models with a published "
          "undistilled counterpart")


if __name__ == "__main__":
    main()
