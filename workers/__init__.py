"""Fulfilment: one downstream effect per payment, run by RQ workers under leases.

Reading order: jobs.py (the RQ job) -> ledger/attempts.py + ledger/lua/ (the state machine
in Redis) -> actions.py (the downstream, within deadline.py's hard deadline); sweeper.py
finds lost jobs and expired leases. Imports the core (``ledger``), never the web app.
"""
