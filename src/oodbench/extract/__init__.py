"""oodbench.extract (see DESIGN.md)."""
