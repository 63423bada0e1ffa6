"""Fulfilment: one downstream effect per payment, run by RQ workers under leases.

Reading order: jobs.py (the RQ job) -> attempts.py + lua/ (the state machine in Redis)
-> actions.py (the downstream) ; sweeper.py finds lost jobs and expired leases.
"""
