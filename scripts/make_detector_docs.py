#!/usr/bin/env python3
"""Write ``docs/detectors.md``, the table of every detector's hyper-parameters and valid values,
from the declarations (``oodbench.detectors._doc_table.markdown``).

    python scripts/make_detector_docs.py           # rewrite the file
    python scripts/make_detector_docs.py --check   # exit 1 when the file is out of date
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import oodbench.detectors  # noqa: F401 - registers every detector
from oodbench.detectors._doc_table import markdown

OUT = Path(__file__).resolve().parents[1] / "docs" / "detectors.md"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that the file is current")
    args = parser.parse_args()
    text = markdown()
    if args.check:
        current = OUT.read_text(encoding="utf-8") if OUT.is_file() else ""
        if current != text:
            print(f"{OUT} is out of date: run python scripts/make_detector_docs.py")
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
