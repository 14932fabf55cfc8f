"""The README's quick tour: every command runs as written on a fresh copy of the examples."""

from __future__ import annotations

import shlex

import pytest

from tests._quick_tour import REPO, quick_tour


def test_the_quick_tour_names_only_oodbench_commands_on_shipped_files() -> None:
    """Cheap guard for every run (the heavy test below runs them): each line is one oodbench
    command (no "a | b" alternatives), and every examples/ path it names ships."""
    commands = quick_tour()
    assert len(commands) >= 10
    for command in commands:
        args = shlex.split(command)
        assert args[0] == "oodbench" and "|" not in args, command
        for arg in args:
            if arg.startswith("examples/") and not arg.startswith("examples/out"):
                assert (REPO / arg).exists(), f"{command}: {arg} does not ship"


@pytest.mark.heavy
def test_every_quick_tour_command_runs_on_a_fresh_copy_of_the_examples(quick_tour_run) -> None:
    """Issue 23 item 1: `oodbench train examples/train_tiny.toml` and `oodbench run
    examples/tiny_experiment.toml --dry-run` stopped at "examples/data/id_train does not
    exist"; now every command of the quick tour runs, in order, in a fresh folder holding only
    a copy of examples/ (as a fresh clone has it; the run is the session's ``quick_tour_run``)."""
    assert quick_tour_run.failure is None, quick_tour_run.failure
    folder = quick_tour_run.folder
    out = folder / "examples" / "out"
    assert (out / "results").is_dir() and (out / "report.html").is_file()
    assert (folder / "oodbench-demo" / "report.html").is_file()
    assert (folder / "vit.png").is_file() and (folder / "findings" / "findings.md").is_file()
    assert list(folder.glob("rank*.png"))
    assert list((folder / "cache" / "train").iterdir())  # the trained model
