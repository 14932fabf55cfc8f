"""Experiment tests run tiny models: one torch thread is faster than two contending ones."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _one_thread_everywhere(one_thread) -> None:
    """Every test here runs with the shared ``one_thread`` fixture."""
