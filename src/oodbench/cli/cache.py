"""``oodbench cache ls | rm KEY | verify [KEY]``: the activation cache."""

from __future__ import annotations

import sys

import click
import pandas as pd

from oodbench.cli.tables import aside, console, resolve, show, table_options


def human_bytes(n: float) -> str:
    """``1536 -> '1.5 KiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


@click.group("cache")
def cache_cmd() -> None:
    """List, remove and verify cached forward passes (under $OODBENCH_CACHE/activations)."""


_LS_COLUMNS = ("key", "model", "source", "rows", "skipped", "capture", "precision", "size", "state")


@cache_cmd.command("ls")
@table_options
def ls_cmd(fmt: str | None, wide: bool) -> None:
    """One row per cached extraction.

    On a terminal: a table with keys cut to 12 characters (any unique prefix works with `rm`
    and `verify`; --wide shows them whole). Piped or redirected: tab-separated lines with whole
    keys, for scripts (the count and size on stderr).
    """
    from oodbench.config import cache_dir
    from oodbench.extract import list_cache

    entries = list_cache()
    short = _short_keys(fmt, wide)
    rows = pd.DataFrame([_ls_row(e, short=short) for e in entries], columns=list(_LS_COLUMNS))
    show(rows, fmt, title=f"activation cache: {cache_dir() / 'activations'}",
         key=("key", "rows", "size"), drop_first=("capture", "precision", "skipped"), wide=wide)
    total = sum(e["size_bytes"] for e in entries)
    aside(f"{len(entries)} entries, {human_bytes(total)}", fmt)


def _short_keys(fmt: str | None, wide: bool) -> bool:
    """Keys cut to 12 characters: only in a terminal's table, without --wide."""
    return resolve(fmt) == "table" and console().is_terminal and not wide


def _ls_row(e: dict, *, short: bool) -> list[str]:
    state = "complete" if e["complete"] else f"partial {e['shards_done']}/{e['n_shards']} shards"
    if e.get("subset_of"):
        state += f" (its arrays are also in {e['subset_of'][:12] if short else e['subset_of']})"
    return [
        e["key"][:12] if short else e["key"],
        str(e["model"]),
        str(e["source"]),
        f"{e['n']}/{e['n_source']}",
        str(e["skipped"]),
        ",".join(e["capture"]),
        str(e["precision"]),
        human_bytes(e["size_bytes"]),
        e.get("error", state),
    ]


@cache_cmd.command("rm")
@click.argument("key")
def rm_cmd(key: str) -> None:
    """Remove the entry whose key is (or starts with) KEY."""
    from oodbench.extract import remove

    click.echo(f"removed {remove(key)}")


@cache_cmd.command("verify")
@click.argument("key", required=False)
@table_options
def verify_cmd(key: str | None, fmt: str | None, wide: bool) -> None:
    """Re-hash the files of entry KEY (or of every entry); exit status 1 if any is damaged."""
    from oodbench.extract import verify

    report = verify(key)
    short = _short_keys(fmt, wide)
    rows = pd.DataFrame([(r["key"][:12] if short else r["key"],
                          "complete" if r["complete"] else "partial",
                          "ok" if r["ok"] else "; ".join(r["problems"])) for r in report],
                        columns=["key", "state", "result"])
    styles = {(i, "result"): "green" if r["ok"] else "red" for i, r in enumerate(report)}
    show(rows, fmt, title="cache verification", key=("key",), styles=styles, wide=wide)
    bad = [r for r in report if not r["ok"]]
    if bad:
        click.echo(
            f"{len(bad)} damaged entr{'y' if len(bad) == 1 else 'ies'}; remove with "
            "`oodbench cache rm KEY` and extract again",
            err=True,
        )
        sys.exit(1)
