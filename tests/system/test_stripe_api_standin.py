"""scripts/stripe_api_standin.py, as the README has a developer run it for Checkout line
items: it says what to give the stack, takes the sessions the replay's --serve-sessions
gives it, answers them to the service's own Stripe client at that STRIPE_API_BASE with that
key, listens on loopback only, and stops on SIGINT (Ctrl-C) or SIGTERM."""

import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ledger.stripe_api import stripe_client
from ledgerctl.replay import sessions, sources
from tests.support.processes import ROOT, free_port, wait_until
from tests.support.stopping import stop

SCRIPT = ROOT / "scripts" / "stripe_api_standin.py"


def listening_on(port: int) -> list[str]:
    """The local addresses of the IPv4 and IPv6 sockets listening on ``port`` (state 0A)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            local, state = row.split()[1], row.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.append(address)
    return found


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_it_serves_the_replayed_sessions_to_the_service_client(sig: int, tmp_path: Path) -> None:
    port, log = free_port(), tmp_path / "standin.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, SCRIPT, "--port", str(port)], stdout=out)
    try:
        base = f"http://127.0.0.1:{port}"
        said = wait_until(
            lambda: [x for x in log.read_text().splitlines() if x.startswith("STRIPE_API_BASE=")],
            timeout=30, what="the settings line",
        )  # fmt: skip
        settings = dict(pair.split("=", 1) for pair in said[0].split())
        assert settings["STRIPE_API_BASE"] == base
        assert settings["CHECKOUT_LINE_ITEMS"] == "true"
        items = list(sources.generated(2, random.Random(5), checkout=True))
        assert sessions.serve(base, items, timeout=10) == 2
        client = stripe_client(settings["STRIPE_API_KEY"], base)
        for session in sessions.sessions_of(items):
            listed = client.v1.checkout.sessions.line_items.list(session["id"], {"limit": 100})
            amounts = [item["amount_total"] for item in listed.data]
            assert listed.data and sum(amounts) == session["amount_total"]
            found = client.v1.checkout.sessions.retrieve(session["id"])
            assert found["client_reference_id"] == session["client_reference_id"]
        assert listening_on(port) == ["0100007F"]  # 127.0.0.1 only (/proc/net/tcp's hex)
        proc.send_signal(sig)
        assert proc.wait(10) == 0
    finally:
        stop(proc)
