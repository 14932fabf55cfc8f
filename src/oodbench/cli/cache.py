"""``oodbench cache ls | rm KEY | verify [KEY]``: the activation cache."""

from __future__ import annotations

import sys

import click
from rich.console import Console
from rich.table import Table


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
def ls_cmd() -> None:
    """One row per cached extraction.

    On a terminal: a table with keys cut to 12 characters (any unique prefix works with `rm`
    and `verify`). Piped or redirected: tab-separated lines with whole keys, for scripts.
    """
    from oodbench.config import cache_dir
    from oodbench.extract import list_cache

    entries = list_cache()
    out = Console()
    rows = [_ls_row(e, short=out.is_terminal) for e in entries]
    if out.is_terminal:
        table = Table(title=f"activation cache: {cache_dir() / 'activations'}")
        for col in _LS_COLUMNS:
            table.add_column(col, justify="right" if col in ("rows", "skipped", "size") else "left")
        for row in rows:
            table.add_row(*row)
        out.print(table)
    else:
        click.echo("\t".join(_LS_COLUMNS))
        for row in rows:
            click.echo("\t".join(row))
    total = sum(e["size_bytes"] for e in entries)
    click.echo(f"{len(entries)} entries, {human_bytes(total)}", err=not out.is_terminal)


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
def verify_cmd(key: str | None) -> None:
    """Re-hash the files of entry KEY (or of every entry); exit status 1 if any is damaged."""
    from oodbench.extract import verify

    report = verify(key)
    table = Table(title="cache verification")
    for col in ("key", "state", "result"):
        table.add_column(col)
    for r in report:
        result = "[green]ok[/green]" if r["ok"] else "[red]" + "; ".join(r["problems"]) + "[/red]"
        table.add_row(r["key"][:12], "complete" if r["complete"] else "partial", result)
    Console().print(table)
    bad = [r for r in report if not r["ok"]]
    if bad:
        click.echo(
            f"{len(bad)} damaged entr{'y' if len(bad) == 1 else 'ies'}; remove with "
            "`oodbench cache rm KEY` and extract again",
            err=True,
        )
        sys.exit(1)
