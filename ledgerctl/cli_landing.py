"""``webhook-ledger fulfil-session cs_...``: what the landing page's POST does
(ledger/landing.py), from a terminal: retrieve the Checkout Session from Stripe's API,
record it if paid, and show its payment's state."""

import sys

import click
import orjson
from rich.text import Text

from ledger import landing, limits
from ledger.deliveries import Ledger
from ledger.read.sessions import SessionFulfilment
from ledger.stripe_api import StripeApi, StripeRefused, StripeUnavailable
from ledgerctl.cli_fulfilment import who
from ledgerctl.context import EXIT_NOT_FOUND, EXIT_STRIPE, Context, emit, json_option, run
from ledgerctl.terminal import kv_table, literal, say


@click.command("fulfil-session")
@click.argument("session_id")
@click.option("--check", is_flag=True, help="Only show the state the ledger has (no Stripe).")
@json_option
@click.pass_obj
def fulfil_session(ctx: Context, session_id: str, check: bool, as_json: bool) -> None:
    """Fulfil a paid Checkout Session once (as its landing page would) and show its state.

    Exit 1: no such session, or not paid; 4: Stripe's API refused or did not answer."""
    if not check and not ctx.settings.STRIPE_API_KEY:
        raise click.UsageError("set STRIPE_API_KEY (a key that can read Checkout Sessions)")
    try:
        if check:
            found = run(lambda: landing.state(ctx.redis, session_id))
        else:
            api = StripeApi(ctx.redis, ctx.settings, slot_wait_s=limits.RATE_WAIT_SECONDS)
            ledger = Ledger(ctx.redis, ctx.settings)
            found = run(lambda: landing.fulfil(ledger, api, session_id, who()))
    except landing.SessionUnknown as exc:
        say(Text("Unknown session:", "red"), str(exc))
        sys.exit(EXIT_NOT_FOUND)
    except landing.SessionNotPaying as exc:
        say(Text("Not fulfilled:", "red"), str(exc))
        sys.exit(EXIT_NOT_FOUND)
    except (StripeUnavailable, StripeRefused) as exc:
        message = literal(exc)  # it names Stripe's API (or STRIPE_API_MAX_RATE) itself
        message.stylize("red")
        say(message)
        sys.exit(EXIT_STRIPE)
    emit(found, as_json, kv_table(f"Checkout Session {session_id}", rows(found)))


def rows(found: SessionFulfilment) -> dict[str, object]:
    return {
        "payment": found.payment_key,
        "state": found.state,
        "payment_status (Stripe)": found.payment_status,
        "recorded now": "yes (source api)" if found.recorded else "no",
        "waiting for": found.waiting,
        "client_reference_id": found.client_reference_id,
        "fulfilled at": found.fulfilled_at,
        "receipt": orjson.dumps(found.receipt).decode() if found.receipt else None,
    }


COMMANDS = (fulfil_session,)
