"""The training runs of the two-process (torchrun, gloo) tests, in one launch.

    torchrun --standalone --nproc_per_node=2 -m tests.train._gloo_runs OUT

runs, one after another in the same two processes (one process group, joined once by
``oodbench.train.ddp.world``): the digits fine-tune of ``tests/train/test_finetune.py``
(2 epochs, ``DDP_SETTINGS``) into ``OUT/digits``, and the CMA and NPOS runs of
``tests/train/test_clip_methods.py`` (3 epochs) into ``OUT/cma`` and ``OUT/npos``. Each test
compares its folder with a single-process run of the same settings. One launch instead of
three: each launch starts three interpreters (torchrun and two ranks) that import torch and
oodbench, the larger part of these tests' CPU time.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.train import _clip_run, _digits_run

#: the folder of each run under OUT, and the run
RUNS = {
    "digits": lambda out: _digits_run.run(out, 2, **_digits_run.DDP_SETTINGS),
    "cma": lambda out: _clip_run.run("cma", out, 3),
    "npos": lambda out: _clip_run.run("npos", out, 3),
}


def main(out: Path) -> None:
    for name, run in RUNS.items():
        run(str(out / name))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
