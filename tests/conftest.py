"""The suite's fixtures live in tests/support/ and are registered here as plugins."""

pytest_plugins = [
    "tests.support.fixtures",
    "tests.support.stack",
    "tests.support.inprocess",
    "tests.support.ha",  # the replicated ledger: cluster
    "tests.support.ha_service",  # the service on it: exits
    "tests.support.stripe_cli",  # the real Stripe CLI and a stand-in of Stripe
]
