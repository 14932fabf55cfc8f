"""oodbench.data (see DESIGN.md)."""
