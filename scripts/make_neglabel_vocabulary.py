#!/usr/bin/env python3
"""Generate NegLabel's candidate vocabulary from WordNet 3.0 (``data.noun`` and ``data.adj``).

NegLabel (Jiang et al., "Negative Label Guided OOD Detection with Pretrained Vision-Language
Models", ICLR 2024, arXiv 2403.20078) mines negative labels from WordNet nouns and adjectives.
Its published word files are the first lemma of every noun / adjective synset, deduplicated:
WordNet 3.0 gives 67,893 nouns (15 % of them is the paper's "10,000 negative labels") and
14,045 adjectives once syntactic markers are stripped. This script writes exactly that list, so the vocabulary is available offline:

    apt-get install wordnet-base        # puts data.noun / data.adj under /usr/share/wordnet
    python scripts/make_neglabel_vocabulary.py  # writes src/oodbench/data/_info/neglabel_vocabulary.tsv

Output: one ``<pos>\\t<word>`` line per word (pos = noun | adj), in WordNet file order,
underscores turned into spaces, adjective syntactic markers such as ``(p)`` removed.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "src" / "oodbench" / "data" / "_info" / "neglabel_vocabulary.tsv"
ADJ_MARKER = re.compile(r"\((a|p|ip)\)$")


def first_lemmas(data_file: Path) -> list[str]:
    """The first lemma of every synset in a WordNet ``data.*`` file, deduplicated, in order."""
    seen: dict[str, None] = {}
    with data_file.open(encoding="latin-1") as fh:
        for line in fh:
            if line.startswith("  "):  # licence header
                continue
            fields = line.split()
            word = ADJ_MARKER.sub("", fields[4]).replace("_", " ")
            seen.setdefault(word, None)
    return list(seen)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wordnet", type=Path, default=Path("/usr/share/wordnet"))
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    rows = []
    for pos, name in (("noun", "data.noun"), ("adj", "data.adj")):
        path = args.wordnet / name
        if not path.exists():
            raise SystemExit(f"{path} not found: install WordNet 3.0 (apt-get install wordnet-base) or pass --wordnet DIR")
        words = first_lemmas(path)
        rows += [f"{pos}\t{w}" for w in words]
        print(f"{pos}: {len(words)} words")
    args.out.write_text("\n".join(rows) + "\n", encoding="utf-8")
    print(f"wrote {len(rows)} words to {args.out}")


if __name__ == "__main__":
    main()
