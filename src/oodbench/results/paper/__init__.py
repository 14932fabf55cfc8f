"""The published C-OOD results of Galil, Dabbah & El-Yaniv (ICLR 2023, arXiv 2302.11893).

The authors published every model x confidence function x severity level they benchmarked in
``paper_results/all_paper_results.csv`` of github.com/mdabbah/COOD_benchmarking (MIT licence).
This module reads that file into a tidy table, ranks models per level, places a user's own
``CoodBenchmark`` results among the published models and draws severity curves (the paper's
Figure 1: AUROC against severity level).

    df = load()                                   # the bundled copy (offline, checksummed)
    get("vit_large_patch32_384", "max_logit")     # one model's rows, full precision
    leaderboard(df, kappa="max_logit", level=[0, 5, 10], top=10)
    rank(df, my_results)                          # percentile rank per detector and level

The package ships the official file byte for byte, compressed with xz (``_data/``, 0.4 MB); its
sha256 is checked against ``PAPER_RESULTS_SHA256`` every time it is read. The file names 706
models (the paper's abstract counts 525: the file also holds CLIP variants, torchvision
duplicates and the ViT ``_original`` checkpoints); every count printed here is of the file.

The package is split by concern: :mod:`oodbench.published.cood` (the table as data: bundled
copy, download, checksum, the paper's kappas; also ``paper.published``), :mod:`.queries` (selection, leaderboards, ranking a user's rows),
:mod:`.protocol` (whether a user's rows follow the paper's protocol) and :mod:`.plots`; every
name is importable from here.

Tidy columns: ``model``, ``kappa`` (short name, ``PAPER_KAPPAS``), ``paper_kappa`` (as in the
file), ``detector`` (the oodbench detector computing that kappa), ``level``, ``percentile``,
``auroc``, ``ood_mean_kappa``, ``id_accuracy``, ``id_auroc``, ``id_mean_kappa``.
"""

from oodbench.published import cood as published
from oodbench.published.cood import (
    BUNDLED_NAME,
    COLUMNS,
    PAPER_KAPPAS,
    PAPER_RESULTS_SHA256,
    PAPER_RESULTS_URL,
    PaperKappa,
    bundled_bytes,
    download,
    kappa_for,
    load,
)
from oodbench.results.paper import plots, protocol, queries
from oodbench.results.paper.plots import (
    plot_among_published,
    plot_model_curves,
    plot_rank,
    plot_severity_curves,
    rank_panels,
)
from oodbench.results.paper.protocol import levels_of, paper_positions, protocol_checks
from oodbench.results.paper.queries import (
    get,
    kappa_name,
    leaderboard,
    models,
    quantize,
    quantized,
    rank,
    reproduces,
    row_labels,
    select,
)

__all__ = [
    "BUNDLED_NAME", "COLUMNS", "PAPER_KAPPAS", "PAPER_RESULTS_SHA256",
    "PAPER_RESULTS_URL", "PaperKappa", "bundled_bytes", "download", "get",
    "kappa_for", "kappa_name", "leaderboard", "levels_of", "load", "models", "paper_positions",
    "plot_among_published", "plot_model_curves", "plot_rank", "plot_severity_curves", "plots",
    "protocol", "protocol_checks", "published", "quantize", "quantized", "queries", "rank",
    "rank_panels", "reproduces", "row_labels", "select",
]
