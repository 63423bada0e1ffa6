"""The replay script's command line: options, scenarios, and the signing secret (checked
before anything is sent: a value that is not a webhook signing secret is refused)."""

import argparse
import json
import os
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

from ledger import settings as settings_module
from ledger.redact import mask_secret
from ledger.setting_fields import exit_with
from ledgerctl import takebacks
from ledgerctl.banner import web_port
from ledgerctl.replay.client import Poster
from ledgerctl.replay.sending import PROBES, Shape

DEV_ENV = Path("var/dev.env")
"""Where scripts/run.sh keeps its local secret (DEV_WEBHOOK_SECRET)."""
DAY_PER_SECOND = 86400.0
"""--stripe-retries' default compression: Stripe's three days in three seconds."""
HOUR_PER_SECOND = 3600.0
"""--retry-like-stripe's default compression: Stripe's three days of retries in 72 s, the
first ones within a second, later ones spanning a Redis failover (a few seconds)."""


def scenario(name: str) -> dict[str, Any]:
    """A scenario's options; an unknown name exits 2 with one line naming the known ones."""
    scenarios = resources.files("ledgerctl.replay").joinpath("scenarios")
    known = sorted(
        f.name.removesuffix(".json") for f in scenarios.iterdir() if f.name.endswith(".json")
    )
    if name not in known:
        exit_with([f"unknown scenario {name!r}: one of {', '.join(known)}"])
    text = scenarios.joinpath(f"{name}.json").read_text()
    return {k: v for k, v in json.loads(text).items() if k != "description"}


def check_writable(option: str, path: Path) -> None:
    """Exit 2 with one line unless ``path`` can be written (its folder made if missing):
    checked before anything is sent, so a run's report is never lost at its end."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        why = "a folder" if path.is_dir() else "" if os.access(path.parent, os.W_OK) else "denied"
    except FileExistsError:
        why = f"{path.parent} is not a folder"
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
    if why:
        exit_with([f"{option} {path}: cannot write there ({why})"])


KIND_WORDS = {
    "none": "nothing taken back",
    "full": "refunded in full",
    "partial": "refunded in part",
    "partials": "refunded in two parts adding up to it",
    "dispute_lost": "a dispute lost",
    "dispute_won": "a dispute won",
    "dispute_lost_won": "a dispute lost and, once its reversal is settled, won",
    "full_failed": "a refund in full and, once the payment is settled, that refund failed",
}
"""What each kind of --refund-kinds sends (ledgerctl/takebacks.py)."""
KIND_NAMES = ", ".join(
    f"{kind} ({KIND_WORDS[kind]})" for kind in takebacks.KINDS + takebacks.OTHER_KINDS
)


def parser(description: str = "") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "files", nargs="*", type=Path, help="event files: JSON, JSON array, JSON Lines, folders"
    )
    p.add_argument(
        "--scenario",
        help="case-study, multi-event, storm, refunds, refund-race or dispute-won "
        "(ledgerctl/replay/scenarios/)",
    )
    src = p.add_argument_group("sources")
    src.add_argument(
        "--generate", type=int, default=0, metavar="N", help="N generated card payments"
    )
    src.add_argument(
        "--checkout",
        action="store_true",
        help="generated payments also send checkout.session.completed",
    )
    src.add_argument(
        "--serve-sessions",
        metavar="URL",
        help="a stand-in of Stripe's API (the service's STRIPE_API_BASE) to give each Checkout "
        "Session sent, with its line items, before its events (never a real Stripe)",
    )
    src.add_argument(
        "--refunds",
        action="store_true",
        help="each payment sent is also refunded or disputed, by the kinds of --refund-kinds "
        "in turn; sent once the payments are fulfilled",
    )
    src.add_argument(
        "--refund-kinds",
        nargs="+",
        default=list(takebacks.KINDS),
        choices=takebacks.KINDS + takebacks.OTHER_KINDS,
        metavar="KIND",
        help=f"with --refunds: the kinds given in turn, each KIND one of {KIND_NAMES} "
        f"(default: {' '.join(takebacks.KINDS)})",
    )
    src.add_argument(
        "--race-refunds",
        action="store_true",
        help="with --refunds: send each right after its payment's own events, racing its "
        "fulfilment",
    )
    src.add_argument(
        "--only", nargs="+", default=[], metavar="TYPE", help="keep only these event types"
    )
    src.add_argument("--from-ledger", action="store_true", help="events stored in the ledger")
    src.add_argument(
        "--id", nargs="+", default=[], dest="ids", metavar="EVT", help="with --from-ledger"
    )
    src.add_argument("--type", help="with --from-ledger: only this type")
    src.add_argument("--payment", help="with --from-ledger: the events of this payment")
    src.add_argument(
        "--since", help="with --from-ledger: first delivered at or after (ISO or epoch ms)"
    )
    src.add_argument(
        "--until", help="with --from-ledger: first delivered at or before (ISO or epoch ms)"
    )
    out = p.add_argument_group("target and signing")
    out.add_argument("--url", default=f"http://127.0.0.1:{web_port(os.environ)}/webhooks/stripe")
    out.add_argument(
        "--secret", help="signing secret (default: STRIPE_WEBHOOK_SECRET, else var/dev.env)"
    )
    shape = p.add_argument_group("delivery shape")
    shape.add_argument("--copies", type=int, default=1, help="valid deliveries per event")
    shape.add_argument("--shuffle", action="store_true")
    shape.add_argument("--seed", type=int, default=None)
    shape.add_argument("--concurrency", type=int, default=1)
    shape.add_argument("--delay", type=float, default=0.0, help="seconds before each request")
    shape.add_argument(
        "--jitter", type=float, default=0.0, help="up to this many extra seconds, random"
    )
    shape.add_argument(
        "--stripe-retries",
        type=int,
        default=0,
        metavar="N",
        help="deliver each event N times on Stripe's backoff schedule",
    )
    shape.add_argument(
        "--retry-like-stripe",
        action="store_true",
        help="send a valid delivery again, as Stripe does, while it is not answered 2xx: at "
        "Stripe's 11 retry offsets over three days, compressed by --compress",
    )
    shape.add_argument(
        "--compress",
        type=float,
        default=None,
        help="time compression of Stripe's schedule (default: a day per second for "
        "--stripe-retries, an hour per second for --retry-like-stripe)",
    )
    shape.add_argument(
        "--request-timeout",
        type=float,
        default=30.0,
        metavar="S",
        help="seconds one request may take in all, answer included (default 30)",
    )
    for probe in PROBES:
        shape.add_argument(f"--{probe}", type=int, default=0, metavar="N", help=f"N {probe} probes")
    rep = p.add_argument_group("report")
    rep.add_argument(
        "--downstream-db", help="SQLite record of effects (default: FULFILMENT_ACTION's, if SQLite)"
    )
    rep.add_argument(
        "--effects-sql",
        metavar="SQL",
        help="count each payment's effects in your own tables with this query (its "
        "%%(payment_key)s named), on --effects-db or FULFILMENT_ACTION's database: the "
        "checker then counts your records, not the ledger's",
    )
    rep.add_argument("--effects-db", metavar="URL", help="postgresql://… or sqlite:///… for it")
    rep.add_argument(
        "--settle-timeout", type=float, default=60.0, help="seconds to wait for fulfilment"
    )
    rep.add_argument("--no-wait", action="store_true", help="do not wait for fulfilment")
    rep.add_argument("--json", type=Path, dest="json_path", help="write the report as JSON here")
    rep.add_argument(
        "--expect-once",
        action="store_true",
        help="exit 1 unless each payment has one effect (none when refunded before it), each "
        "payment taken back one reversal, and nothing acknowledged is missing",
    )
    rep.add_argument("--quiet", action="store_true", help="no progress, no table")
    return p


def parse_args(argv: list[str] | None, description: str = "") -> argparse.Namespace:
    p = parser(description)
    first = p.parse_args(argv)
    if first.scenario:
        p.set_defaults(**scenario(first.scenario))
        return p.parse_args(argv)
    return first


def millis(value: str | None) -> int | None:
    if value is None:
        return None
    return int(value) if value.isdigit() else int(datetime.fromisoformat(value).timestamp() * 1000)


def shape(args: argparse.Namespace) -> Shape:
    """How to send, checked: a --url the client cannot post to is refused (exit 2)."""
    try:
        Poster(args.url, args.request_timeout)
    except ValueError as exc:
        exit_with([f"invalid --url: {exc}"])
    if not args.request_timeout > 0 or not compression(args) > 0:
        exit_with(["invalid --request-timeout or --compress: expected a number above 0"])
    return Shape(
        args.concurrency,
        args.delay,
        args.jitter,
        args.retry_like_stripe,
        compression(args),
        args.request_timeout,
    )


def compression(args: argparse.Namespace) -> float:
    """The time compression of Stripe's schedule for this run."""
    if args.compress is not None:
        return float(args.compress)
    return DAY_PER_SECOND if args.stripe_retries else HOUR_PER_SECOND


def signing_secret(args: argparse.Namespace) -> str:
    """--secret, else STRIPE_WEBHOOK_SECRET's first, else var/dev.env's; each must be one
    webhook signing secret (``whsec_…``), else exit 2 with one line."""
    if args.secret:
        return checked_secret("--secret", str(args.secret))
    configured = settings_module.load_or_exit().STRIPE_WEBHOOK_SECRET  # checked as a setting
    if configured:
        return configured[0]
    if DEV_ENV.exists():
        for line in DEV_ENV.read_text().splitlines():
            if line.startswith("DEV_WEBHOOK_SECRET="):
                return checked_secret(f"{DEV_ENV}'s DEV_WEBHOOK_SECRET", line.split("=", 1)[1])
    exit_with([f"no signing secret: pass --secret or set STRIPE_WEBHOOK_SECRET; {WHERE}"])


WHERE = (
    f"the service's: {DEV_ENV} (DEV_WEBHOOK_SECRET) for scripts/run.sh, whose banner lists "
    "the active secrets' fingerprints; 'stripe listen --print-secret' for the Stripe CLI's"
)
"""Where the right signing secret is, for a refusal and for the report."""


def checked_secret(source: str, secret: str) -> str:
    """``secret`` if it is one webhook signing secret; else exit 2 naming ``source``."""
    value = secret.strip()
    why = ""
    if "," in value:
        why = "more than one secret; "
    elif value.startswith(("sk_", "rk_", "pk_")):
        why = "a Stripe API key, not a webhook signing secret; "
    elif not value.startswith("whsec_") or value == "whsec_" or not value.isprintable():
        why = "it does not start with whsec_; "
    if why:
        shown = mask_secret(secret) if secret.isprintable() else repr(mask_secret(secret))
        exit_with(
            [f"invalid {source} {shown}: {why}expected a webhook signing secret whsec_…, {WHERE}"]
        )
    return value
