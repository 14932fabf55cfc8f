"""Tests of the research studies of the top-level ``studies/`` folder, each loading its script by
path (``tests/_scripts.py``)."""
