"""The ``oodbench`` command line (thin: every command calls the library)."""
