"""oodbench.run (see DESIGN.md)."""
