"""``python -m examples.shop migrate``: the shop's and the service's tables in
``SHOP_DATABASE_URL`` (idempotent)."""

import os
import sys

from examples.shop import migrate

if __name__ == "__main__":
    if sys.argv[1:] != ["migrate"]:
        sys.exit("usage: python -m examples.shop migrate")
    migrate(os.environ["SHOP_DATABASE_URL"])
    print("examples/shop: entitlements and webhook_ledger_effects ready")
