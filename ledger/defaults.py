"""The fulfil latency constants of the read model (every other constant is in
ledger/limits.py, every setting in ledger/settings.py)."""

LATENCY_WINDOW_SECONDS = 3600
"""Fulfil latency percentiles (summary, dashboard) are over the payments fulfilled this
recently, so an old backlog stops dominating them once it is older."""

LATENCY_SAMPLES = 10000
"""Most payments (the latest) those percentiles read."""
