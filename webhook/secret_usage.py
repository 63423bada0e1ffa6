"""Which secret verifies the deliveries, by label.

Deliveries are counted under the verifying secret's label (``secret:{label}`` in the stats
hash). Ledgers written before labels counted by position; such entries are plain numbers
and shown as ``#n``.
"""


def display(label: str) -> str:
    """A recorded label as people read it; a pre-label position becomes ``#n``."""
    return f"#{label} (position, before labels)" if label.isdigit() else label
