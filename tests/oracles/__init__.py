"""Reference computations that oodbench is checked against (re-statements of OpenOOD's and the
C-OOD code's postprocessors), and the test-side runs that compare them (the fidelity table).

They live with the tests, not in ``studies/``: the scripts of ``speed/`` and ``studies/`` import
only ``oodbench``, and no test imports them (``tests/test_architecture.py``).
"""
