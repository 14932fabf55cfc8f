"""oodbench.metrics (see DESIGN.md)."""
