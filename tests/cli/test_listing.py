"""``oodbench list``: what each registry holds, printed as written."""

from __future__ import annotations

from click.testing import CliRunner

from oodbench.cli.main import main


def test_list_models_names_the_extras_to_install() -> None:
    """Issue 23 item 9: "pip install oodbench[clip]" was printed as "pip install oodbench" (rich
    took "[clip]" for a style tag)."""
    result = CliRunner().invoke(main, ["list", "models"])
    assert result.exit_code == 0, result.output
    assert "pip install oodbench[clip]" in result.output
    assert "clip:<arch>/<pretrained tag>" in result.output

