"""oodbench.models (see DESIGN.md)."""
