"""``webhook-ledger check-endpoint``: does the Stripe webhook endpoint send every event type
these settings need (ledger/subscriptions.py)? Its ``enabled_events`` are read through
Stripe's API (``GET /v1/webhook_endpoints``, every page) with STRIPE_API_KEY at
STRIPE_API_BASE: no retries, a timeout, no redirect followed. Exit 0: nothing needed is
missing; 1: a needed type is missing, the endpoint is disabled, or there is no such
endpoint; 2: usage (no key, several endpoints and no ``--url``); 4: Stripe's API refused the
key or did not answer. The key is shown by its kind only (``sk_test_***``)."""

import sys
from dataclasses import asdict, dataclass, field
from typing import Any

import click
import stripe
from rich.text import Text

from ledger import limits
from ledger.redact import mask_secret, mask_url
from ledger.settings import Settings
from ledger.stripe_api import client_of
from ledger.subscriptions import needed, snapshot_types
from ledgerctl.context import EXIT_NOT_FOUND, EXIT_STRIPE, Context, emit, json_option
from ledgerctl.terminal import say

PAGE = 100
"""Endpoints per request: the most Stripe's list endpoints return."""
EVERY_TYPE = "*"


class ApiProblem(Exception):
    """Stripe's API did not give the endpoints; the message is the one line to print."""


@dataclass
class Verdict:
    """One endpoint against what the settings need."""

    endpoint: dict[str, Any]
    """``id``, ``url``, ``status``, ``enabled_events`` as Stripe answered."""
    needed: dict[str, str]
    missing: dict[str, str] = field(default_factory=dict)
    """Needed types the endpoint does not send, each with why it is needed."""
    unsent: list[str] = field(default_factory=list)
    """Types the ledger asks for, not needed by these settings, that the endpoint does not send."""
    disabled: bool = False
    thin: list[str] = field(default_factory=list)
    """Thin types PAID_EVENT_TYPES lists: an event destination sends them, not this endpoint."""

    @property
    def ok(self) -> bool:
        return not (self.missing or self.disabled)


def endpoints(settings: Settings) -> list[dict[str, Any]]:
    """Every webhook endpoint of the key's account and mode, page after page."""
    listed = client_of(settings).v1.webhook_endpoints
    found: list[dict[str, Any]] = []
    try:
        while True:
            params: dict[str, Any] = {"limit": PAGE}
            if found:
                params["starting_after"] = found[-1]["id"]
            page = listed.list(params)  # type: ignore[arg-type]
            found += [e.to_dict() for e in page.data]
            if not page.has_more or not page.data:
                return found
    except stripe.StripeError as exc:
        raise ApiProblem(problem(exc, settings)) from exc


def problem(exc: stripe.StripeError, settings: Settings) -> str:
    """One line saying why, never the key (Stripe's 401 message quotes part of it)."""
    key = mask_secret(settings.STRIPE_API_KEY)
    where = mask_url(settings.STRIPE_API_BASE)
    status = exc.http_status
    if isinstance(exc, stripe.AuthenticationError):
        return f"refused STRIPE_API_KEY {key} ({status}): not a valid key for {where}"
    if isinstance(exc, stripe.PermissionError):
        return (
            f"refused STRIPE_API_KEY {key} ({status}) for reading webhook endpoints: a "
            "restricted key needs read access to Webhook Endpoints"
        )
    if isinstance(exc, stripe.APIConnectionError):
        cause = type(exc.__cause__).__name__ if exc.__cause__ else "no answer"
        timeout = limits.STRIPE_API_TIMEOUT_SECONDS
        return f"no answer from {where} ({cause}; timeout {timeout:g} s)"
    if status is not None and 300 <= status < 400:
        return f"{where} answered {status}, a redirect: not followed"
    if isinstance(exc, stripe.RateLimitError):
        return f"{where} answered {status} (too many requests): try again later"
    said = f"answered {status} ({type(exc).__name__})" if status else f"{type(exc).__name__}"
    return f"{where} {said}"


def pick(found: list[dict[str, Any]], url: str | None) -> dict[str, Any]:
    """The endpoint to check: the one at ``url``, else the only one."""
    if url is not None:
        at = [e for e in found if str(e.get("url", "")).rstrip("/") == url.rstrip("/")]
        if not at:
            urls = ", ".join(sorted(str(e.get("url")) for e in found)) or "none"
            say(Text("No webhook endpoint at", "red"), f"{url} (the key's account has: {urls})")
            sys.exit(EXIT_NOT_FOUND)
        return at[0]
    if not found:
        say(Text("No webhook endpoint", "red"), "in the key's account and mode")
        sys.exit(EXIT_NOT_FOUND)
    if len(found) > 1:
        urls = ", ".join(sorted(str(e.get("url")) for e in found))
        raise click.UsageError(f"{len(found)} webhook endpoints ({urls}): name one with --url")
    return found[0]


def judge(endpoint: dict[str, Any], settings: Settings) -> Verdict:
    sent = set(endpoint.get("enabled_events") or ())
    every = EVERY_TYPE in sent
    need = needed(settings)
    shown = {k: endpoint.get(k) for k in ("id", "url", "status", "enabled_events")}
    return Verdict(
        endpoint=shown,
        needed=need,
        missing={} if every else {t: why for t, why in need.items() if t not in sent},
        unsent=[]
        if every
        else [t for t in snapshot_types(settings.reversal_on) if t not in sent and t not in need],
        disabled=endpoint.get("status") == "disabled",
        thin=[t for t in settings.PAID_EVENT_TYPES if t not in need and t.startswith("v1.")],
    )


def lines(verdict: Verdict) -> list[Text]:
    e = verdict.endpoint
    sent = e.get("enabled_events") or []
    kinds = "every type (*)" if EVERY_TYPE in sent else f"{len(sent)} types"
    out = [Text(f"endpoint {e.get('id')}  {e.get('url')}  {e.get('status')}, sends {kinds}")]
    if verdict.disabled:
        out.append(Text("disabled: Stripe sends it nothing; enable it in the Dashboard", "red"))
    for event_type, why in verdict.missing.items():
        out.append(Text.assemble(("missing ", "red"), event_type, f"  ({why})"))
    if verdict.unsent:
        unsent = ", ".join(verdict.unsent)
        out.append(Text(f"not sent, not needed here (recorded when sent): {unsent}"))
    if verdict.thin:
        thin = ", ".join(verdict.thin)
        out.append(Text(f"not checked (thin, sent by an event destination): {thin}"))
    if verdict.ok:
        count = len(verdict.needed)
        out.append(Text(f"ok: sends every type these settings need ({count})", "green"))
    return out


@click.command("check-endpoint")
@click.option("--url", help="The endpoint's URL, when the account has several endpoints.")
@json_option
@click.pass_obj
def check_endpoint(ctx: Context, url: str | None, as_json: bool) -> None:
    """Whether the Stripe webhook endpoint sends every event type these settings need
    (STRIPE_API_KEY; read access to Webhook Endpoints is enough).

    Exit 1: a needed type is missing, the endpoint is disabled or not found; 4: Stripe's API
    refused the key or did not answer."""
    settings = ctx.settings
    if not settings.STRIPE_API_KEY:
        raise click.UsageError("set STRIPE_API_KEY (a key that can read webhook endpoints)")
    try:
        found = endpoints(settings)
    except ApiProblem as exc:
        say(Text("Stripe's API:", "red"), str(exc))
        sys.exit(EXIT_STRIPE)
    verdict = judge(pick(found, url), settings)
    emit({**asdict(verdict), "ok": verdict.ok}, as_json, *lines(verdict))
    sys.exit(0 if verdict.ok else EXIT_NOT_FOUND)


COMMANDS = (check_endpoint,)
