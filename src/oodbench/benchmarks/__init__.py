"""oodbench.benchmarks (see DESIGN.md)."""
