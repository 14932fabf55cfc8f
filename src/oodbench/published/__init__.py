"""Published OOD results as data, and the like-for-like comparison of your results with them.

    from oodbench import published
    published.tables()                          # name -> TableInfo (title, paper, source, protocol)
    published.load("imagenet1k-vs-sun")          # DataFrame of strings: values exactly as printed
    published.printed("imagenet1k-vs-sun")       # the source's own table, cell for cell
    published.printed("openood-v1.5-imagenet1k-fsood", method="MSP")   # its rows of one method
    published.select(df, method="ReAct (ResNet-50)")
    published.compare(results_rows)             # each of your rows beside its published row

    recipes.row_recipes(published.load("imagenet1k-vs-sun"))   # each row's recipe id
    recipes.recipe("cma-vit-b16-neglabel").value("training", "lr")   # 1e-05, with its source

    oodbench published list
    oodbench published show imagenet1k-vs-sun --method "ReAct (ResNet-50)" --format markdown
    oodbench published compare results/ [--allow-mismatch]
    oodbench published reproduce imagenet1k-vs-sun --method "SCALE (ResNet50)" --out DIR [--dry-run]

**Recipes** (:mod:`oodbench.published.recipes`, ``_tables/recipes/<family>.toml``): everything a
published number depends on, each value with its source, ``unknown`` where not stated; every
row of the ImageNet-1k vs SUN, loss and tuning tables and the C-OOD ViT-L/32-384 rows points to
one. ``oodbench published reproduce`` (:mod:`oodbench.run.reproduce`) writes a row's recipe as
an experiment, names every setting it could not take from the recipe, and runs it.

The tables (``_tables/catalogue.toml``): the C-OOD results of Galil et al. (ICLR 2023, bundled
in :mod:`oodbench.results.paper`), the ImageNet-1k vs SUN leaderboard (22 methods), the
ImageNet-1k loss table of arXiv 2501.12191, the ImageNet-1K ResNet-50 tuning table of arXiv
2602.05935 (with its Table 3's far-OOD and ID-accuracy values and Table 2's per-set values) and
OpenOOD v1.5's ImageNet-1K full-spectrum results (read from the OpenOOD repository's
``results/imagenet1k_fsood.csv``; the catalogue says which commit). Each row carries the keys
that decide whether a value is comparable with yours (see ``catalogue.ROW_COLUMNS``): method,
oodbench detector and preset, backbone and its training, the oodbench specs of those exact
weights, benchmark and OOD set, metric with its convention and unit, fit data, tuning
protocol, the value as printed, the paper and table, and where the value and the settings were
read. How a comparison is decided: :mod:`oodbench.published.compare`.

**Adding a row** (e.g. your method's leaderboard entry) is a data-only change:

1. add one line per published value to the table's CSV in ``src/oodbench/published/_tables/``,
   every column filled as the others are (leave a key empty when the paper does not state it:
   it is then reported as "unknown", never guessed); ``value`` exactly as printed;
2. put the file's new sha256 (``sha256sum FILE``) into the table's entry of ``catalogue.toml``;
3. run ``pytest tests/published`` (it checks every row's detector, preset, metric and unit).

**Adding a table**: a new CSV with the ``ROW_COLUMNS`` (plus the source's own columns if you
want ``printed`` to reproduce the source), and a ``[tables.<name>]`` entry in
``catalogue.toml`` with ``title``, ``file``, ``sha256``, ``paper``, ``source``, ``metrics``,
``protocol`` (the results columns every row was measured under, e.g. ``{ n_id = 50000 }``) and
optionally ``printed`` (without it the table has no printed form: ``printed()`` and
``oodbench published show --printed`` refuse it, naming the tables that have one) and
``compare_by``. ``source`` names where the values were read, as it is (the site, the archive
snapshot, the repository and commit). No code changes.
"""

from __future__ import annotations

from oodbench.published.catalogue import (
    ROW_COLUMNS,
    TableInfo,
    load,
    load_all,
    printed,
    select,
    table_info,
    tables,
    with_printed_form,
)
from oodbench.published.compare import Check, compare, protocol_checks, row_checks

__all__ = [
    "ROW_COLUMNS",
    "Check",
    "TableInfo",
    "compare",
    "load",
    "load_all",
    "printed",
    "protocol_checks",
    "row_checks",
    "select",
    "table_info",
    "tables",
    "with_printed_form",
]
