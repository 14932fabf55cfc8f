"""The README's quick tour: every command runs as written on a fresh copy of the examples."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import click
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
    assert (out / "vit.png").is_file() and (out / "findings" / "findings.md").is_file()
    assert (out / "rank.png").is_file() and not list(folder.glob("*.png"))
    assert list((folder / "cache" / "train").iterdir())  # the trained model


#: the options of oodbench commands that name a file or folder the command writes
WRITER_OPTIONS = ("out", "png")


def _written(command: str) -> list[Path]:
    """The files and folders a quick-tour command writes, relative to the repository root:
    its --out / --png values (defaults included: `oodbench demo` writes oodbench-demo/), the
    output folder of the experiment `oodbench run` runs, the folder `oodbench report` writes
    into, and a training config's own output; the activation and training caches live under
    OODBENCH_CACHE, outside the clone."""
    from oodbench.cli.main import main
    from oodbench.run.experiment import load_experiment
    from oodbench.train.config import read_train_config

    cmd: click.Command = main
    args = shlex.split(command)[1:]
    names = []
    while isinstance(cmd, click.Group):
        names.append(args[0])
        found = cmd.get_command(click.Context(cmd), args[0])
        assert found is not None, command
        cmd, args = found, args[1:]
    params = cmd.make_context(" ".join(names), args).params  # validated, defaults included
    paths = [Path(params[name]) for name in WRITER_OPTIONS if params.get(name) is not None]
    if names == ["run"] and not params["dry_run"]:
        paths.append(load_experiment(params["experiment"], check_paths=False).output)
    if names == ["report"] and params["out"] is None:
        paths.append(Path(params["results_dir"]))
    if names == ["train"]:
        output = read_train_config(params["config"]).train.output
        paths += [] if output is None else [Path(output)]
    return [Path(os.path.relpath(Path(p).resolve(), REPO)) for p in paths]


def test_quick_tour_outputs_are_ignored_by_git(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Issue 33 item 5: the tour left vit.png, rank-*.png and findings/ untracked in a clone.
    Every path a tour command writes is ignored by the repository's .gitignore (checked by git
    in an empty repository holding only that file, without the user's global excludes)."""
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed: `git check-ignore` decides what .gitignore ignores")
    monkeypatch.chdir(REPO)  # the tour runs in the clone's root
    written = {path for command in quick_tour() for path in _written(command)}
    assert {Path("examples/out"), Path("examples/out/vit.png"), Path("examples/out/rank.png"),
            Path("examples/out/findings"), Path("oodbench-demo")} <= written
    assert all(not p.is_absolute() and ".." not in p.parts for p in written), written
    (tmp_path / ".gitignore").write_bytes((REPO / ".gitignore").read_bytes())
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run([git, "init", "-q", str(tmp_path)], check=True, env=env)
    for path in sorted(written):
        # a folder is checked as one (a trailing slash), and by a file written inside it
        for probe in (f"{path.as_posix()}/", f"{path.as_posix()}/x.png") \
                if not path.suffix else (path.as_posix(),):
            done = subprocess.run([git, "check-ignore", "-q", "--no-index", probe], cwd=tmp_path,
                                  env=env)
            assert done.returncode == 0, f"{probe} (written by the quick tour) is not ignored by git"
