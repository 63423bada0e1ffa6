"""The suite's fixtures live in tests/support/ and are registered here as plugins."""

pytest_plugins = [
    "tests.support.fixtures",
    "tests.support.stack",
    "tests.support.inprocess",
]
