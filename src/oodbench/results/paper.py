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

Tidy columns: ``model``, ``kappa`` (short name, ``PAPER_KAPPAS``), ``paper_kappa`` (as in the
file), ``detector`` (the oodbench detector computing that kappa), ``level``, ``percentile``,
``auroc``, ``ood_mean_kappa``, ``id_accuracy``, ``id_auroc``, ``id_mean_kappa``.
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import json
import lzma
import os
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_DOWN, ROUND_HALF_EVEN, Decimal
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from oodbench.config import cache_dir
from oodbench.errors import (
    CacheError,
    DataError,
    EmptyInputError,
    InvalidInputError,
    MissingDataError,
    ProtocolMismatchError,
    UnknownNameError,
)
from oodbench.published.compare import Check

PAPER_RESULTS_URL = (
    "https://raw.githubusercontent.com/mdabbah/COOD_benchmarking/main/"
    "paper_results/all_paper_results.csv"
)
#: sha256 of ``all_paper_results.csv`` (commit e0cab2f of mdabbah/COOD_benchmarking)
PAPER_RESULTS_SHA256 = "80cac24f7698e3ae8eadcb710573b728c716abf0817e1424f72914c07430263f"
#: the official file, xz-compressed byte for byte, inside the package
BUNDLED_NAME = "all_paper_results.csv.xz"

#: the file's columns -> tidy names (the same names as ``CoodBenchmark`` rows)
COLUMNS = {
    "model name": "model",
    "confidence function": "paper_kappa",
    "severity level": "level",
    "percentile": "percentile",
    "ood-auroc": "auroc",
    "ood_avg_conf": "ood_mean_kappa",
    "id-acc": "id_accuracy",
    "id-auroc": "id_auroc",
    "id_avg_conf": "id_mean_kappa",
}


@dataclass(frozen=True)
class PaperKappa:
    """One confidence function of the paper and the oodbench detector that computes it."""

    paper_name: str
    kappa: str
    detector: str
    hyperparams: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    def published_row(self) -> dict[str, str]:
        """This kappa's configuration as the keys of a published row (``oodbench.published``):
        ``detector``, ``preset`` (``"cood"`` unless it names another) and ``hyperparams``."""
        extra = dict(self.hyperparams)
        preset = str(extra.pop("preset", "cood"))
        return {"method": self.paper_name, "detector": self.detector, "preset": preset,
                "hyperparams": json.dumps(extra, sort_keys=True) if extra else ""}

    def reproduces(self, hyperparams: Mapping[str, Any]) -> bool:
        """Whether a detector run with ``hyperparams`` computes this published kappa: the
        configuration check of :mod:`oodbench.published.compare` (every value the preset and
        the given hyper-parameters set is the same)."""
        from oodbench.published.compare import configuration_check

        yours = {"detector": self.detector, "hyperparams": json.dumps(dict(hyperparams))}
        return configuration_check(self.published_row(), yours).status == "same"


#: every confidence function in the published results, in one table
PAPER_KAPPAS: tuple[PaperKappa, ...] = (
    PaperKappa("softmax", "softmax", "msp", note="maximum softmax probability"),
    PaperKappa("max_logit", "max_logit", "maxlogit", note="maximum logit"),
    PaperKappa("entropy", "entropy", "entropy", note="negative entropy of the softmax"),
    PaperKappa(
        "odin_temperature-2_noise_mag-1e-05",
        "odin",
        "odin",
        {"preset": "cood_code"},
        "ODIN with T=2 and noise 1e-5 as the official code computes it (preset 'cood_code': "
        "the input gradient of the cross-entropy of the softmax probabilities, divided by the "
        "ImageNet std); preset 'cood' is ODIN as the paper describes it",
    ),
    PaperKappa(
        "mcd_entropy",
        "mc_dropout",
        "mc_dropout",
        {"preset": "cood"},
        "negative entropy of the mean softmax over 30 MC-dropout passes (preset 'cood'; the "
        "'*_original' ViTs with old timm's dropout 0.1, vit_drop_rate)",
    ),
)
_BY_PAPER = {k.paper_name: k for k in PAPER_KAPPAS}


def kappa_for(name: str) -> PaperKappa:
    """The paper kappa for a short name, a paper name or an oodbench detector name."""
    for k in PAPER_KAPPAS:
        if name in (k.kappa, k.paper_name, k.detector):
            return k
    valid = {k.kappa for k in PAPER_KAPPAS} | {k.detector for k in PAPER_KAPPAS}
    raise UnknownNameError("paper confidence function", name, valid)


# -- loading ----------------------------------------------------------------------------------
def download(url: str = PAPER_RESULTS_URL, *, sha256: str | None = PAPER_RESULTS_SHA256) -> Path:
    """Download ``url`` once into ``cache_dir()/paper/`` and verify its checksum."""
    from oodbench.data.download import file_digest

    dest = cache_dir() / "paper" / Path(url.split("?", 1)[0]).name
    if dest.is_file() and (sha256 is None or file_digest(dest, "sha256") == sha256):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(tmp, "wb") as fh:
            for chunk in iter(lambda: response.read(1 << 20), b""):
                fh.write(chunk)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise MissingDataError(
            f"could not download {url} ({err}); download it by hand and pass its path, or put "
            f"it at {dest}"
        ) from err
    digest = file_digest(tmp, "sha256")
    if sha256 is not None and digest != sha256:
        tmp.unlink(missing_ok=True)
        raise CacheError(
            f"{url} has sha256 {digest}, expected {sha256}: the published file changed or the "
            "download is corrupt; pass sha256=None to accept it"
        )
    os.replace(tmp, dest)
    return dest


def bundled_bytes() -> bytes:
    """The official ``all_paper_results.csv``, decompressed from the package and checksummed."""
    packed = resources.files("oodbench.results").joinpath("_data", BUNDLED_NAME)
    try:
        data = lzma.decompress(packed.read_bytes())
    except (OSError, lzma.LZMAError) as err:
        raise DataError(
            f"the bundled C-OOD results ({BUNDLED_NAME}) cannot be read ({err}); reinstall "
            f"oodbench, or pass a copy of all_paper_results.csv (--csv / load(path))"
        ) from err
    digest = hashlib.sha256(data).hexdigest()
    if digest != PAPER_RESULTS_SHA256:
        raise CacheError(
            f"the bundled C-OOD results have sha256 {digest}, expected {PAPER_RESULTS_SHA256}: "
            "the package is damaged; reinstall oodbench or pass a copy of all_paper_results.csv"
        )
    return data


@lru_cache(maxsize=1)
def _bundled_table() -> pd.DataFrame:
    return _tidy(pd.read_csv(io.BytesIO(bundled_bytes())), BUNDLED_NAME)


def load(path_or_url: str | Path | None = None) -> pd.DataFrame:
    """The published results as a tidy DataFrame (one row per model x kappa x level).

    ``None`` (default): the copy bundled with oodbench, offline. ``path_or_url``: a local copy
    of ``all_paper_results.csv``, or an ``http(s)`` URL (downloaded once into the cache,
    checksummed when it is the official URL). Values keep the file's full precision.
    """
    if path_or_url is None:
        return _bundled_table().copy()
    text = str(path_or_url)
    if text.startswith(("http://", "https://")):
        path = download(text, sha256=PAPER_RESULTS_SHA256 if text == PAPER_RESULTS_URL else None)
    else:
        path = Path(path_or_url)
        if not path.is_file():
            raise MissingDataError(
                f"{path} does not exist; pass the path of all_paper_results.csv (from "
                f"{PAPER_RESULTS_URL}), or nothing to use the copy bundled with oodbench"
            )
    return _tidy(pd.read_csv(path), str(path))


def _tidy(raw: pd.DataFrame, origin: str) -> pd.DataFrame:
    missing = sorted(set(COLUMNS) - set(raw.columns))
    if missing:
        raise DataError(
            f"{origin} is not the C-OOD paper results format: missing columns {missing} "
            f"(expected {sorted(COLUMNS)})"
        )
    df = raw[list(COLUMNS)].rename(columns=COLUMNS)
    df["model"] = df["model"].astype(str)
    df["paper_kappa"] = df["paper_kappa"].astype(str)
    unknown = sorted(set(df["paper_kappa"]) - set(_BY_PAPER))
    df.insert(1, "kappa", df["paper_kappa"].map(lambda n: _BY_PAPER[n].kappa if n in _BY_PAPER else n))
    df.insert(2, "detector", df["paper_kappa"].map(lambda n: _BY_PAPER[n].detector if n in _BY_PAPER else n))
    df["level"] = df["level"].astype(np.int64)
    df.attrs["unknown_kappas"] = unknown
    return df.reset_index(drop=True)


# -- queries ----------------------------------------------------------------------------------
def _kappa_name(df: pd.DataFrame, kappa: str) -> str:
    """``kappa`` as it appears in the table's ``kappa`` column (short names, detector names)."""
    return kappa if kappa in set(df["kappa"]) else kappa_for(kappa).kappa


def select(df: pd.DataFrame, kappa: str, level: int | Sequence[int] | None) -> pd.DataFrame:
    """The rows of one kappa (short, paper or detector name) at ``level`` (one, several, or
    ``None`` for all); raises when the kappa or a level is not published."""
    out = df[df["kappa"] == _kappa_name(df, kappa)]
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
        rows = rows[rows["kappa"] == _kappa_name(table, kappa)]
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


# -- comparing a user's results with the paper ----------------------------------------------------
def protocol_checks(results: pd.DataFrame) -> list[Check]:
    """How a user's C-OOD rows compare with the paper's benchmark, item by item.

    The C-OOD table's protocol in the published catalogue (``oodbench.published``: 11 severity
    levels, a window of 1,000 classes, the 50,000 ImageNet-1k validation images) checked with
    :func:`oodbench.published.compare.protocol_checks` against the rows' ``n_levels`` (or their
    levels), ``n_classes`` and ``n_id``; then the pool (``n_pool_classes``), which can be shown
    but not verified: the paper's pool is its own filtered ImageNet-21k.
    """
    from oodbench.published import protocol_checks as catalogue_checks
    from oodbench.published import table_info

    checks = catalogue_checks(table_info("cood"), results.assign(level=_levels_of(results)))
    pool = None
    if "n_pool_classes" in results.columns and results["n_pool_classes"].notna().any():
        pool = sorted({int(v) for v in results["n_pool_classes"].dropna()})
    return [*checks, Check("OOD pool", "the paper's filtered ImageNet-21k",
                           "not recorded" if pool is None
                           else f"{', '.join(f'{v:,}' for v in pool)} classes (identity not checked)",
                           "unknown")]


def _levels_of(results: pd.DataFrame) -> pd.Series:
    if "level" in results.columns:
        return results["level"].astype(np.int64)
    if "group" in results.columns:
        parsed = results["group"].astype(str).str.extract(r"^level_(\d+)$")[0]
        if parsed.isna().any():
            raise InvalidInputError(
                "results 'group' values must look like 'level_3' (CoodBenchmark rows)"
            )
        return parsed.astype(np.int64)
    raise InvalidInputError(
        "results need a 'level' column (or CoodBenchmark's 'group' = 'level_<i>'); got columns "
        f"{list(results.columns)}"
    )


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

    Rows whose detector has no published counterpart are returned with NaN ranks. When the
    results carry ``hyperparams`` (JSON), ``like_for_like`` says whether the row's detector
    configuration is the one behind the published numbers (:meth:`PaperKappa.reproduces`, the
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
    levels = _levels_of(model_results)
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
    for (_, row), level in zip(model_results.iterrows(), levels):
        try:
            paper_kappa: PaperKappa | None = kappa_for(kappa or str(row["detector"]))
        except UnknownNameError:
            paper_kappa = None
        k = None if paper_kappa is None else paper_kappa.kappa
        ref = published.get((k, int(level)))
        value = float(row[metric])
        out: dict[str, Any] = {"model": row["model"]} if "model" in model_results.columns else {}
        out.update({"detector": row["detector"], "kappa": k, "level": int(level), metric: value})
        if "hyperparams" in model_results.columns and paper_kappa is not None:
            same_detector = paper_kappa.detector == row["detector"]
            out["like_for_like"] = same_detector and paper_kappa.reproduces(
                json.loads(str(row["hyperparams"])))
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
    ranked["comparable"] = not any(c.status != "same" for c in checks)
    ranked.attrs["protocol"] = checks
    return ranked


# -- figures -------------------------------------------------------------------------------------
def plot_severity_curves(
    df: pd.DataFrame,
    models: Sequence[str],
    kappa: str = "max_logit",
    ax: Any = None,
    *,
    metric: str = "auroc",
    own: dict[str, pd.DataFrame] | None = None,
) -> Any:
    """AUROC against severity level for published ``models`` (the paper's Figure 1).

    ``own``: extra curves, ``{label: CoodBenchmark rows of one detector}``, drawn dashed.
    Returns the matplotlib axes.
    """
    import matplotlib.pyplot as plt

    sub = select(df, kappa, None)
    unknown = sorted(set(models) - set(sub["model"]))
    if unknown:
        raise UnknownNameError(f"published model (kappa {kappa})", unknown[0], set(sub["model"]))
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    for model in models:
        curve = sub[sub["model"] == model].sort_values("level")
        ax.plot(curve["level"], curve[metric], marker="o", label=model)
    for label, results in (own or {}).items():
        levels = _levels_of(results)
        order = np.argsort(levels.to_numpy(), kind="stable")
        ax.plot(levels.to_numpy()[order], results[metric].to_numpy()[order], marker="s",
                linestyle="--", label=label)
    ax.set_xlabel("severity level (0 = easiest)")
    ax.set_ylabel(metric.upper() if metric == "auroc" else metric)
    ax.set_title(f"C-OOD severity curves, kappa = {_kappa_name(df, kappa)}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def plot_model_curves(df: pd.DataFrame, model: str, *, metric: str = "auroc") -> Any:
    """Every published kappa of one model: ``metric`` against severity level (a ``Figure``)."""
    from matplotlib.figure import Figure

    rows = get(model, df=df)
    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.subplots()
    for i, (k, curve) in enumerate(rows.groupby("kappa", sort=False)):
        ax.plot(curve["level"], curve[metric], marker="os^Dv"[i % 5], label=k)
    ax.set_xlabel("C-OOD severity level (0 = easiest, 10 = hardest)")
    ax.set_ylabel("AUROC" if metric == "auroc" else metric)
    ax.set_title(f"{model}: published C-OOD severity curves")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def plot_among_published(
    df: pd.DataFrame,
    model_results: pd.DataFrame,
    *,
    detector: str | None = None,
    kappa: str | None = None,
    metric: str = "auroc",
    label: str = "yours",
) -> Any:
    """One detector's severity curve drawn over every published curve of the same kappa.

    Published curves are thin grey lines (their median dashed); the user's curve is drawn on
    top, with its 95 % interval as error bars when the rows carry ``ci_low``/``ci_high`` (long
    rows) or ``<metric>_ci_low``/``<metric>_ci_high`` (wide rows). Returns a matplotlib
    ``Figure`` (no global pyplot state).
    """
    from matplotlib.figure import Figure

    names = list(dict.fromkeys(model_results["detector"].astype(str)))
    if detector is None:
        if len(names) != 1:
            raise InvalidInputError(
                f"the results hold several detectors {names}; pass detector= to choose the curve"
            )
        detector = names[0]
    mine = model_results[model_results["detector"].astype(str) == detector]
    if mine.empty:
        raise UnknownNameError("detector in the results", detector, names)
    k = kappa_for(kappa or detector).kappa
    published = select(df, k, None).pivot_table(index="model", columns="level", values=metric)
    fig = Figure(figsize=(7.6, 4.4))
    ax = fig.subplots()
    x = published.columns.to_numpy()
    for values in published.to_numpy():
        ax.plot(x, values, color="0.7", linewidth=0.5, alpha=0.35)
    ax.plot(x, np.nanmedian(published.to_numpy(), axis=0), color="0.3", linestyle="--",
            linewidth=1.4, label=f"published median ({len(published)} models)")
    levels = _levels_of(mine).to_numpy()
    order = np.argsort(levels, kind="stable")
    y = mine[metric].to_numpy(dtype=float)[order]
    low, high = _interval_columns(mine, metric)
    if low is not None and high is not None:
        err = np.vstack([y - low[order], high[order] - y])
        ax.errorbar(levels[order], y, yerr=err, color="C3", marker="o", linewidth=2.2,
                    capsize=3, label=f"{label} ({detector}, 95 % CI)")
    else:
        ax.plot(levels[order], y, color="C3", marker="o", linewidth=2.2,
                label=f"{label} ({detector})")
    ax.set_xlabel("C-OOD severity level (0 = easiest, 10 = hardest)")
    ax.set_ylabel("AUROC" if metric == "auroc" else metric)
    ax.set_title(f"{label} among the published C-OOD curves, kappa = {k}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    return fig


def _interval_columns(rows: pd.DataFrame, metric: str) -> tuple[np.ndarray | None, np.ndarray | None]:
    for low, high in ((f"{metric}_ci_low", f"{metric}_ci_high"), ("ci_low", "ci_high")):
        if low in rows.columns and high in rows.columns and rows[low].notna().all():
            return rows[low].to_numpy(dtype=float), rows[high].to_numpy(dtype=float)
    return None, None
