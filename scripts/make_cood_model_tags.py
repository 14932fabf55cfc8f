#!/usr/bin/env python3
"""Write the training-regime tags of every model in the published C-OOD results.

Reads the model names of the bundled ``all_paper_results.csv`` (Galil et al., ICLR 2023) and
tags each with the rules of ``oodbench.results.model_tags.TAG_RULES`` (timm's pretrained tags:
ImageNet-21k pre-training, distillation, Noisy Student, semi/weakly supervised, CLIP,
adversarial, SAM, ...), plus the counterpart trained without distillation where one is
published. The output is committed so that a reviewer can read every model's tags:

    python scripts/make_cood_model_tags.py   # writes src/oodbench/results/_data/cood_model_tags.csv
"""

from __future__ import annotations

import argparse
from pathlib import Path

from oodbench.results import paper
from oodbench.results.model_tags import TAGS_FILE, tag_table

OUT = Path(__file__).resolve().parents[1] / "src" / "oodbench" / "results" / "_data" / TAGS_FILE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    table = tag_table(set(paper.load()["model"]))
    table.to_csv(args.out, index=False, lineterminator="\n")
    counts = table["tags"].str.split(";").explode().value_counts()
    print(f"wrote {args.out}: {len(table)} models")
    print(counts[counts.index != ""].to_string())
    print(f"distilled models with a published undistilled counterpart: "
          f"{(table['undistilled'] != '').sum()}")


if __name__ == "__main__":
    main()
