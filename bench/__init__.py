"""Benchmarks: intake, durability, fulfilment, memory and scale (see docs/BENCHMARKS.md).

Run everything with ``.venv/bin/python bench/run_all.py`` (about 10 minutes on 2 cores)
or one section with ``.venv/bin/python -m bench.intake --quick`` and so on.
"""
