"""oodbench.results (see DESIGN.md)."""
