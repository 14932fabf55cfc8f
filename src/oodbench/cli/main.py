"""``oodbench`` entry point: a click group; each sub-command lives in its own module here.

Errors a user can cause (``OodbenchError``) are printed as one line with the fix, no traceback
(exit status 2); Ctrl-C prints one line saying what was kept and how to resume (exit status
130); oodbench's warnings print as one line, ``warning: ...``. ``OODBENCH_DEBUG=1`` shows the
traceback and Python's own warning format (with the source line).
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings

import click

from oodbench import __version__
from oodbench.errors import Interrupted, OodbenchError

#: exit status after Ctrl-C: 128 + SIGINT, the shell's convention (1 is "a cell failed")
EXIT_INTERRUPTED = 130


def _one_line_warning(message, category, filename, lineno, line=None):  # type: ignore[no-untyped-def]
    """``warnings.formatwarning`` for the command line: oodbench's own warnings as one line,
    ``warning: <message>`` (no source path and line); others as Python formats them."""
    if not category.__module__.startswith("oodbench"):
        return _PYTHON_FORMATWARNING(message, category, filename, lineno, line)
    return f"warning: {message}\n"


_PYTHON_FORMATWARNING = warnings.formatwarning


class _FriendlyGroup(click.Group):
    def invoke(self, ctx: click.Context):  # type: ignore[override]
        previous = warnings.formatwarning  # (a recorder such as pytest.warns still records)
        if not os.environ.get("OODBENCH_DEBUG"):
            warnings.formatwarning = _one_line_warning
        try:
            return super().invoke(ctx)
        except OodbenchError as err:
            if os.environ.get("OODBENCH_DEBUG"):
                raise
            click.secho(f"error: {err}", fg="red", err=True)
            sys.exit(2)
        except KeyboardInterrupt as err:  # one line, no traceback, and not a failure's status
            if os.environ.get("OODBENCH_DEBUG"):
                raise
            kept = str(err) if isinstance(err, Interrupted) and str(err) else (
                "what finished is kept; run the same command again to resume")
            click.secho(f"interrupted: {kept}", fg="yellow", err=True)
            sys.exit(EXIT_INTERRUPTED)
        finally:
            warnings.formatwarning = previous


@click.group(cls=_FriendlyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="oodbench")
def main() -> None:
    """oodbench: benchmark out-of-distribution detection of image classifiers.

    One forward pass per (model, dataset) is cached; every detector, the C-OOD severity
    benchmark (Galil et al., ICLR 2023) and the standard OOD benchmarks run from it.

    \b
    Start with:   oodbench demo          (offline, about a minute)
    Then:         oodbench list detectors
                  oodbench run experiment.toml && oodbench report results/
    """


def _register_commands() -> None:
    from oodbench.cli import listing

    main.add_command(listing.list_cmd)
    # each sub-command module adds itself here, one line each:
    main.add_command(importlib.import_module("oodbench.cli.cache").cache_cmd)
    main.add_command(importlib.import_module("oodbench.cli.extract").extract_cmd)
    main.add_command(importlib.import_module("oodbench.cli.paper").paper_cmd)
    main.add_command(importlib.import_module("oodbench.cli.published").published_cmd)
    main.add_command(importlib.import_module("oodbench.cli.cood_pool").cood_pool_cmd)
    main.add_command(importlib.import_module("oodbench.cli.data").data_cmd)
    main.add_command(importlib.import_module("oodbench.cli.demo").demo_cmd)
    main.add_command(importlib.import_module("oodbench.cli.run").run_cmd)
    main.add_command(importlib.import_module("oodbench.cli.report").report_cmd)
    main.add_command(importlib.import_module("oodbench.cli.train").train_cmd)


_register_commands()

if __name__ == "__main__":  # pragma: no cover
    main()
