"""The suite's fixtures live in tests/support/ and are registered here as plugins."""

import os
from pathlib import Path

import pytest

pytest_plugins = [
    "tests.support.fixtures",
    "tests.support.stack",
    "tests.support.inprocess",
    "tests.support.reversal_ledger",  # refunds and disputes, one of each outcome: taken
    "tests.support.ha",  # the replicated ledger: cluster
    "tests.support.ha_service",  # the service on it: exits
    "tests.support.stripe_cli",  # the real Stripe CLI and a stand-in of Stripe
    "tests.support.stripe_api",  # a stand-in of Stripe's API: stripe_api
    "tests.support.postgres",  # a real PostgreSQL: the user's database of the PostgreSQL action
    "tests.support.protocol.fixtures",  # the protocol explorer's Redis: protocol_redis
]
# The explorer's rules and invariants assert in tests/support/protocol/: show their operands.
pytest.register_assert_rewrite("tests.support.protocol")

SYSTEM = Path(__file__).parent / "system"
SYSTEM_PROCESSES = 2
"""``pytest tests/system`` runs its files on this many pytest-xdist processes (one file per
process at a time: a file's tests share its module fixtures); ``-n N`` chooses, ``-n 0``
runs them in this process (for ``-s`` or ``--pdb``). Any other selection runs in one
process unless ``-n`` is given. Each test starts its own servers on free ports, its files in
its own tmp_path."""


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Before pytest-xdist reads ``-n``: the system tier, run as a whole, in parallel."""
    if getattr(config.option, "numprocesses", "") is not None:  # -n given, or no xdist
        return
    if "PYTEST_XDIST_WORKER" in os.environ:  # a worker runs what its controller sent
        return
    if config.args and all(Path(arg).resolve() == SYSTEM for arg in config.args):
        config.option.numprocesses = SYSTEM_PROCESSES
        config.option.dist = "loadfile"
