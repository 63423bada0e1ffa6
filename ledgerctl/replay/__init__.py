"""Parts of scripts/replay_events.py: where events come from, how they are sent, the report."""
