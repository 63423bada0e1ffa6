"""``python -m examples.shop migrate``: the shop's and the service's tables in
``SHOP_DATABASE_URL`` (idempotent). ``python -m examples.shop clients PORT``: the processes
connected to 127.0.0.1:PORT, one ``pid (name)`` a line (run.sh's check before it stops a
PostgreSQL server an earlier run left)."""

import os
import sys

from examples.shop import migrate
from examples.shop.clients import clients

if __name__ == "__main__":
    match sys.argv[1:]:
        case ["migrate"]:
            migrate(os.environ["SHOP_DATABASE_URL"])
            print("examples/shop: entitlements and webhook_ledger_effects ready")
        case ["clients", port] if port.isdigit():
            print("\n".join(f"{pid} ({name})" for pid, name in clients(int(port))))
        case _:
            sys.exit("usage: python -m examples.shop migrate | clients PORT")
