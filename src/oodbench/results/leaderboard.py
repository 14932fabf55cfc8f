"""Leaderboards and summaries computed from the tidy results table (pure pandas, no I/O).

    leaderboard(table, "cood")        # one row per model x detector config, best AUROC first
    by_group(table, "openood", "auroc")   # the same rows, one column per OOD group / level
    near_far(table, "openood")        # mean AUROC and FPR@95 over near and over far groups

A leaderboard value is the unweighted mean over the benchmark's OOD groups (C-OOD: over its
severity levels), as OpenOOD reports its near/far means. Both FPR@95 conventions are kept and
labelled by name: *ID positive* (the threshold keeps 95 % of ID samples; ODIN, Energy, KNN
papers) and *OOD positive* (the threshold catches 95 % of OOD samples; OpenOOD v1.5).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from oodbench.params import canonical, params

#: display names of the metrics (FPR@95 conventions named explicitly)
METRIC_LABELS = {
    "auroc": "AUROC",
    "fpr95_id": "FPR@95 (ID positive)",
    "fpr95_ood": "FPR@95 (OOD positive, OpenOOD)",
    "aupr_in": "AUPR-In",
    "aupr_out": "AUPR-Out",
    "ap_in": "AP-In",
    "ap_out": "AP-Out",
    "id_accuracy": "ID accuracy",
    "id_auroc": "ID-AUROC",
    "aurc": "AURC",
}
#: whether a larger value is better, per metric
HIGHER_IS_BETTER = {
    "auroc": True, "fpr95_id": False, "fpr95_ood": False, "aupr_in": True, "aupr_out": True,
    "ap_in": True, "ap_out": True, "id_accuracy": True, "id_auroc": True, "aurc": False,
}
DEFAULT_METRICS = ("auroc", "fpr95_id", "fpr95_ood", "aupr_in", "aupr_out")
KEYS = ["model", "detector", "hyperparams"]


def ok_rows(table: pd.DataFrame, benchmark: str | None = None) -> pd.DataFrame:
    """The rows of finished cells (``status == "ok"``), optionally of one benchmark."""
    rows = table[table["status"] == "ok"]
    if benchmark is not None:
        rows = rows[rows["benchmark"] == benchmark]
    return rows


def benchmarks(table: pd.DataFrame) -> list[str]:
    """The benchmarks with results, in the order they were run: by the time of their first
    finished cell (a fresh local run runs an experiment's benchmarks in the file's order), then
    by first appearance. Not by the rows' order alone: the store lists cells by key, and a key
    holds the weights' path, so the same experiment run into two folders listed its benchmarks
    in two orders."""
    rows = ok_rows(table)
    if "time" in rows.columns and len(rows):
        rows = rows.sort_values("time", key=lambda t: t.astype(str), kind="stable")
    return list(dict.fromkeys(rows["benchmark"].astype(str)))


def is_severity(table: pd.DataFrame, benchmark: str) -> bool:
    """Whether the benchmark's groups are C-OOD severity levels."""
    rows = ok_rows(table, benchmark)
    return bool(len(rows)) and bool(rows["level"].notna().all())


def detector_labels(rows: pd.DataFrame, results: pd.DataFrame | None = None) -> pd.Series:
    """Each row's configuration label (:func:`oodbench.detectors.label.configuration_label`):
    ``detector`` with the hyper-parameters that differ between its configurations here and
    those that tuning chose, and how the numbers were made when ``results`` (the long rows)
    record it: preset, fit data and tuning protocol, e.g. ``"react (percentile=95) [openood,
    fit on train, tuned by held_out_classes]"``."""
    from oodbench.detectors.label import configuration_label

    configs_of = rows.assign(hyperparams=rows["hyperparams"].map(params))
    varying: dict[str, list[str]] = {}
    for name, group in configs_of.groupby("detector"):
        configs = list(dict.fromkeys(group["hyperparams"]))
        keys = sorted({k for c in configs for k in c})
        varying[str(name)] = [k for k in keys if len({canonical(c.get(k)) for c in configs}) > 1]
    columns = [c for c in ("preset", "fit_data", "tuning")
               if results is not None and c in results.columns]
    made = (results.drop_duplicates(KEYS).set_index(KEYS)[columns] if columns and results is not None
            else None)
    labels = []
    models = rows["model"] if "model" in rows.columns else pd.Series("", index=rows.index)
    for key in zip(models, rows["detector"], rows["hyperparams"]):
        name, hyperparams = str(key[1]), params(key[2])
        notes: dict[str, Any] = {"preset": "", "fit_data": "", "tuning": None}
        if made is not None and key in made.index:
            notes.update({c: v for c, v in made.loc[key].items() if c == "tuning" or pd.notna(v)})
        tuning = params(notes["tuning"])
        chosen = list(tuning.get("best_params", {}))
        shown = {k: hyperparams[k] for k in (*varying.get(name, []), *chosen) if k in hyperparams}
        labels.append(configuration_label(name, shown, preset=str(notes["preset"]),
                                          fit_data=str(notes["fit_data"])
                                          or str(hyperparams.get("fit_data", "")),
                                          tuned_by=str(tuning.get("protocol", ""))))
    return pd.Series(labels, index=rows.index, dtype=object)


def leaderboard(
    table: pd.DataFrame,
    benchmark: str,
    *,
    metrics: Sequence[str] = DEFAULT_METRICS,
    sort_by: str = "auroc",
) -> pd.DataFrame:
    """One row per (model, detector configuration): each metric's mean over the OOD groups.

    Sorted best first by ``sort_by`` (``rank`` 1 = best); ``id_accuracy`` is added when the
    benchmark reports it, ``groups`` counts the OOD groups averaged.
    """
    rows = ok_rows(table, benchmark)
    if rows.empty:
        return pd.DataFrame(columns=["rank", *KEYS, "label", *metrics, "groups"])
    wanted = [*metrics] + (["id_accuracy"] if "id_accuracy" not in metrics else [])
    rows = rows[rows["metric"].isin(wanted)]
    wide = rows.pivot_table(index=KEYS, columns="metric", values="value", aggfunc="mean")
    groups = rows[rows["metric"] == metrics[0]].groupby(KEYS)["group"].nunique()
    board = wide.reindex(columns=[m for m in wanted if m in wide.columns]).reset_index()
    board["groups"] = board.set_index(KEYS).index.map(groups).to_numpy()
    board["label"] = detector_labels(board, rows).to_numpy()
    if sort_by in board.columns:
        board = board.sort_values(sort_by, ascending=not HIGHER_IS_BETTER.get(sort_by, True),
                                  kind="stable")
    board.insert(0, "rank", range(1, len(board) + 1))
    return board.reset_index(drop=True)


def by_group(
    table: pd.DataFrame, benchmark: str, metric: str = "auroc", *, values: str = "value"
) -> pd.DataFrame:
    """One row per (model, detector configuration), one column per OOD group (levels in order).

    ``values``: the column to spread, ``value`` or an interval bound (``ci_low``, ``ci_high``).
    """
    rows = ok_rows(table, benchmark)
    rows = rows[rows["metric"] == metric]
    if rows.empty:
        return pd.DataFrame(columns=[*KEYS, "label"])
    order = (rows.sort_values(["level", "group"])["group"].drop_duplicates().tolist()
             if rows["level"].notna().all() else list(dict.fromkeys(rows["group"])))
    wide = rows.pivot_table(index=KEYS, columns="group", values=values, aggfunc="mean")
    wide = wide.reindex(columns=order).reset_index()
    wide.columns.name = None
    wide.insert(3, "label", detector_labels(wide, rows).to_numpy())
    return wide


def near_far(
    table: pd.DataFrame, benchmark: str, metrics: Sequence[str] = ("auroc", "fpr95_id", "fpr95_ood")
) -> pd.DataFrame:
    """Per (model, detector configuration): each metric's mean over the near and the far groups.

    Columns ``<metric> near`` / ``<metric> far``; empty when no group of the benchmark is
    labelled near or far. Sorted by far AUROC when present.
    """
    rows = ok_rows(table, benchmark)
    rows = rows[rows["kind"].isin(["near", "far"]) & rows["metric"].isin(metrics)]
    if rows.empty:
        return pd.DataFrame(columns=KEYS)
    wide = rows.pivot_table(index=KEYS, columns=["metric", "kind"], values="value", aggfunc="mean")
    wide.columns = [f"{m} {k}" for m, k in wide.columns]
    ordered = [f"{m} {k}" for m in metrics for k in ("near", "far") if f"{m} {k}" in wide.columns]
    out = wide[ordered].reset_index()
    out.insert(3, "label", detector_labels(out, rows).to_numpy())
    sort = "auroc far" if "auroc far" in out.columns else ordered[0]
    return out.sort_values(sort, ascending=not HIGHER_IS_BETTER.get(sort.split()[0], True),
                           kind="stable").reset_index(drop=True)


def problems(table: pd.DataFrame, status: str = "failed") -> pd.DataFrame:
    """The ``failed`` (or ``skipped``) cells: model, detector, benchmark and the message."""
    rows = table[table["status"] == status]
    return rows[["model", "detector", "hyperparams", "benchmark", "error"]].reset_index(drop=True)
