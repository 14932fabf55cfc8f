"""Looking up the published C-OOD results: one model, one kappa, the per-level leaderboard, the
paper's truncated figures, and a user's own rows ranked among the published models."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from decimal import ROUND_DOWN, ROUND_HALF_EVEN, Decimal
from typing import Any

import numpy as np
import pandas as pd

from oodbench.errors import (
    EmptyInputError,
    InvalidInputError,
    ProtocolMismatchError,
    UnknownNameError,
)
from oodbench.params import params
from oodbench.published.compare import configuration_check
from oodbench.published.cood import PaperKappa, kappa_for, load
from oodbench.results.paper.protocol import levels_of, paper_positions, protocol_checks


def kappa_name(df: pd.DataFrame, kappa: str) -> str:
    """``kappa`` as it appears in the table's ``kappa`` column (short names, detector names)."""
    return kappa if kappa in set(df["kappa"]) else kappa_for(kappa).kappa


def select(df: pd.DataFrame, kappa: str, level: int | Sequence[int] | None) -> pd.DataFrame:
    """The rows of one kappa (short, paper or detector name) at ``level`` (one, several, or
    ``None`` for all); raises when the kappa or a level is not published."""
    out = df[df["kappa"] == kappa_name(df, kappa)]
    if out.empty:
        raise InvalidInputError(
            f"no published results for kappa {kappa!r}; the file has {sorted(set(df['kappa']))}"
        )
    if level is not None:
        levels = [int(level)] if isinstance(level, (int, np.integer)) else [int(v) for v in level]
        bad = sorted(set(levels) - set(out["level"]))
        if bad:
            raise InvalidInputError(
                f"levels {bad} are not in the published results (levels "
                f"{sorted(set(out['level']))})"
            )
        out = out[out["level"].isin(levels)]
    return out


def models(df: pd.DataFrame, pattern: str | None = None) -> list[str]:
    """The published model names matching ``pattern``, sorted.

    ``pattern``: an exact name, or a shell-style pattern when it holds ``*``, ``?`` or ``[``
    (``vit_large_*``); ``None``: every model. Raises ``UnknownNameError`` (with the closest
    names) when nothing matches.
    """
    names = sorted(set(df["model"]))
    if pattern is None:
        return names
    if any(ch in pattern for ch in "*?["):
        chosen = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
    else:
        chosen = [pattern] if pattern in names else []
    if not chosen:
        raise UnknownNameError("published C-OOD model", pattern, names)
    return chosen


def get(model: str, kappa: str | None = None, *, df: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every published row of one model (all kappas, or one), full precision, by kappa and level.

    ``df``: the table to read (default: :func:`load`'s bundled copy).
    """
    table = load() if df is None else df
    rows = table[table["model"].isin(models(table, model))]
    if kappa is not None:
        rows = rows[rows["kappa"] == kappa_name(table, kappa)]
        if rows.empty:
            have = sorted(set(table[table["model"] == model]["kappa"]))
            raise InvalidInputError(
                f"{model!r} has no published results for kappa {kappa!r}; it has {have}"
            )
    return rows.sort_values(["model", "kappa", "level"], kind="stable").reset_index(drop=True)


def quantize(value: float, digits: int, *, truncate: bool = False) -> float:
    """``value`` to ``digits`` decimals: rounded half-to-even, or cut toward zero (``truncate``).

    Works on the shortest decimal that reads back as ``value`` (``repr``), so truncating
    0.9632055716 to 4 digits gives 0.9632 (the paper's leaderboard truncates; plain rounding
    would turn the ViT-L/32-384 level-0 max-logit AUROC 0.9958857884 into 0.9959).
    """
    if not np.isfinite(value):
        return float(value)
    mode = ROUND_DOWN if truncate else ROUND_HALF_EVEN
    return float(Decimal(repr(float(value))).quantize(Decimal(1).scaleb(-digits), rounding=mode))


def quantized(df: pd.DataFrame, digits: int | None, *, truncate: bool = False) -> pd.DataFrame:
    """``df`` with every float column passed through :func:`quantize` (``None``: unchanged)."""
    if digits is None:
        return df
    out = df.copy()
    for col in out.columns:
        if out[col].dtype.kind == "f":
            out[col] = [quantize(v, digits, truncate=truncate) for v in out[col]]
    return out


def leaderboard(
    df: pd.DataFrame,
    kappa: str = "max_logit",
    level: int | Sequence[int] = 0,
    top: int | None = 10,
    *,
    metric: str = "auroc",
    model: str | None = None,
) -> pd.DataFrame:
    """The best ``top`` models per level for one kappa, best first (``rank`` 1 = best).

    ``model``: only the models matching this name or pattern (see :func:`models`), each with
    its rank among all published models; ``top`` is then not applied. Columns: ``level``,
    ``rank``, ``model``, ``metric``'s column, ``id_accuracy``, ``id_auroc``, ``percentile``.
    Ties share the best rank (``method="min"``). Values keep the file's full precision.
    """
    sub = select(df, kappa, level).copy()
    sub["rank"] = sub.groupby("level")[metric].rank(ascending=False, method="min").astype(np.int64)
    sub = sub.sort_values(["level", "rank", "model"], kind="stable")
    if model is not None:
        sub = sub[sub["model"].isin(models(sub, model))]
    elif top is not None:
        sub = sub.groupby("level", sort=True).head(top)
    cols = ["level", "rank", "model", metric, "id_accuracy", "id_auroc", "percentile"]
    return sub[list(dict.fromkeys(cols))].reset_index(drop=True)


def reproduces(kappa: PaperKappa, hyperparams: Mapping[str, Any]) -> bool:
    """Whether a detector run with ``hyperparams`` computes the published ``kappa``: the
    configuration check of :mod:`oodbench.published.compare` (every value the preset and the
    given hyper-parameters set is the same)."""
    yours = {"detector": kappa.detector, "hyperparams": params(hyperparams)}
    return configuration_check(kappa.published_row(), yours).status == "same"


def row_labels(model_results: pd.DataFrame) -> pd.Series:
    """Each row's detector configuration as shown in a rank table and its figure: the ``label``
    column when the rows carry one, else the label of :func:`oodbench.results.leaderboard.
    detector_labels` when they carry ``hyperparams`` (``"knn (k=1) [fit on train]"``: the
    values that tell a detector's configurations apart), else the detector's name."""
    from oodbench.results.leaderboard import detector_labels

    if "label" in model_results.columns:
        return model_results["label"].astype(str)
    if "hyperparams" in model_results.columns:
        return detector_labels(model_results)
    return model_results["detector"].astype(str)


def rank(
    df: pd.DataFrame,
    model_results: pd.DataFrame,
    *,
    kappa: str | None = None,
    metric: str = "auroc",
    allow_mismatch: bool = False,
) -> pd.DataFrame:
    """Place a user's results among the published models, per detector and severity level.

    ``model_results``: rows of ``CoodBenchmark.run`` or :func:`oodbench.cood.benchmark`
    (columns ``detector``, ``level`` or ``group``, and ``metric``). Each row's detector is
    matched to the paper kappa it computes (``PAPER_KAPPAS``; ``kappa`` overrides it for every
    row). For each row::

        percentile_rank = 100 * (#published below + 0.5 * #published equal) / #published
        position        = 1 + #published strictly better

    Rows whose detector has no published counterpart are returned with NaN ranks. ``label``
    names each row's detector configuration (:func:`row_labels`: two ``knn`` rows of different
    ``k`` read ``knn (k=1)`` and ``knn (k=3)``). A row is compared with the published level
    nearest to its place on the paper's 0..10 severity axis (:func:`paper_positions`: the
    hardest of two levels with the paper's level 10, not its level 1); ``paper_level`` says
    which, a column present when it differs from some row's own ``level``. When the results
    carry ``hyperparams`` (``Params``, or the JSON text of a CSV), ``like_for_like`` says
    whether the row's detector
    configuration is the one behind the published numbers (:func:`reproduces`, the
    configuration check of ``oodbench.published.compare``; e.g. ODIN with
    ``preset="cood_code"``).

    The rows are first compared with the paper's benchmark (:func:`protocol_checks`, the
    published catalogue's C-OOD protocol checked as ``oodbench published compare`` does): when the
    number of levels, the window or the ID set differ, a rank would mix two benchmarks, so
    ``ProtocolMismatchError`` is raised unless ``allow_mismatch``. The result's
    ``attrs["protocol"]`` holds the checks and its ``comparable`` column says whether every
    checkable item matched.
    """
    if model_results.empty:
        raise EmptyInputError(
            "no C-OOD rows to rank: pass the per-level rows of a C-OOD benchmark "
            "(CoodBenchmark.run, oodbench.cood.benchmark or the cood rows of `oodbench run`)"
        )
    for col in ("detector", metric):
        if col not in model_results.columns:
            raise InvalidInputError(
                f"results need a {col!r} column (CoodBenchmark rows); got {list(model_results.columns)}"
            )
    positions = paper_positions(model_results)
    labels = row_labels(model_results)
    checks = protocol_checks(model_results)
    differing = [c for c in checks if c.status == "differs"]
    if differing and not allow_mismatch:
        listed = "; ".join(f"{c.item}: paper {c.published}, yours {c.yours}" for c in differing)
        raise ProtocolMismatchError(
            f"these C-OOD results do not come from the paper's benchmark ({listed}), so their "
            "rank among the published models would compare two different benchmarks. Run the "
            "paper's protocol (ImageNet-1k validation as ID, the filtered ImageNet-21k pool, "
            "window=1000, n_levels=11), or pass allow_mismatch=True (--allow-mismatch) to rank "
            "them anyway, flagged as not comparable"
        )
    published = {name: g for name, g in df.groupby(["kappa", "level"])}
    rows = []
    for (_, row), level, position, label in zip(model_results.iterrows(),
                                               levels_of(model_results), positions, labels):
        paper_level = int(round(position))
        try:
            paper_kappa: PaperKappa | None = kappa_for(kappa or str(row["detector"]))
        except UnknownNameError:
            paper_kappa = None
        k = None if paper_kappa is None else paper_kappa.kappa
        ref = published.get((k, paper_level))
        value = float(row[metric])
        out: dict[str, Any] = {"model": row["model"]} if "model" in model_results.columns else {}
        out.update({"detector": row["detector"], "label": label, "kappa": k, "level": int(level),
                    "paper_level": paper_level, metric: value})
        if "hyperparams" in model_results.columns and paper_kappa is not None:
            same_detector = paper_kappa.detector == row["detector"]
            out["like_for_like"] = same_detector and reproduces(paper_kappa,
                                                                params(row["hyperparams"]))
        if ref is None or ref.empty:
            out.update(n_published=0, position=np.nan, percentile_rank=np.nan,
                       published_best=np.nan, published_median=np.nan, best_model=None)
        else:
            values = ref[metric].to_numpy()
            below, equal = (values < value).sum(), (values == value).sum()
            best = int(values.argmax())
            out.update(
                n_published=int(values.size),
                position=int((values > value).sum()) + 1,
                percentile_rank=100.0 * (below + 0.5 * equal) / values.size,
                published_best=float(values[best]),
                published_median=float(np.median(values)),
                best_model=ref["model"].iloc[best],
            )
        rows.append(out)
    ranked = pd.DataFrame(rows)
    if (ranked["paper_level"] == ranked["level"]).all():
        ranked = ranked.drop(columns="paper_level")
    ranked["comparable"] = not any(c.status != "same" for c in checks)
    ranked.attrs["protocol"] = checks
    return ranked
