"""``python -m oodbench ...``: the same command line as ``oodbench ...``."""

from oodbench.cli.main import main

main(prog_name="oodbench")
