"""Strings from event data are data in every ``webhook-ledger`` output: Rich markup, emoji
codes, terminal control sequences and bidi overrides in events, errors, receipts,
rejections, downstream rows, bundle names and arguments are printed literally, and whole:
the CLI runs here as when piped (no terminal, no COLUMNS), and every id is longer than 80
characters."""

import json
import random
import re
from pathlib import Path

import pytest
from click.testing import Result
from redis import Redis

from ledger import keys
from ledger.purchase import purchase_of
from ledgerctl import samples
from ledgerctl.terminal import literal
from tests.support.helpers import cli_ok, run_cli, signed_headers
from tests.support.processes import service_env
from workers.actions import SqliteAction

# One per class tried; each is put in every field the CLI prints (docs/RELIABILITY.md).
HOSTILE = {
    "unbalanced closing tag": "[/]",
    "named closing tag": "[/bold]",
    "hyperlink markup": "[link=https://evil.example/]click[/link]",
    "hidden-text style": "[black on black]hidden[/]",
    "emoji code": ":warning:",
    "backslash-escaped markup": "\\[bold]x",
    "ANSI CSI (clear screen, colour)": "\x1b[2J\x1b[31m",
    "OSC 8 terminal hyperlink": "\x1b]8;;https://evil.example/\x1b\\",
    "8-bit C1 CSI": "\x9b31m",
    "carriage return, backspace, bell": "ok\r\x08\x07",
    "bidi override": "\u202eevil",
}
H = "".join(HOSTILE.values())
ID = re.sub(r"\s", "", H)  # ids are space-separated in the payment record
# Raw control or bidi characters (Rich writes none itself when stdout is not a terminal).
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
EVENT_ID, PAYMENT_KEY = f"evt_{ID}", f"pi_{ID}"


def shown(value: str) -> str:
    """How the CLI must show ``value``: as typed, control characters escaped."""
    return literal(value).plain


@pytest.fixture
def hostile_ledger(client, redis: Redis, config) -> dict[str, str]:
    """A ledger whose every printed field holds the hostile strings; the CLI's env."""
    event = samples.payment_events(random.Random(4))[2]
    event["id"], event["data"]["object"]["id"] = EVENT_ID, PAYMENT_KEY
    event["data"]["object"]["description"] = H
    event["data"]["object"]["metadata"] = {H: H}
    body = json.dumps(event, ensure_ascii=False).encode()  # C1 and bidi stay raw in the payload
    answer = client.post("/webhooks/stripe", data=body, headers=signed_headers(body))
    assert answer.status_code == 200, answer.get_json()
    event_key, payment = keys.event(EVENT_ID), keys.payment(PAYMENT_KEY)
    fields = [f.decode() for f in redis.hkeys(event_key) if f not in (b"n", b"body")]
    redis.hset(event_key, mapping={f: f"{f}={H}" for f in fields} | {f"src:{H}": 1})
    redis.hset(
        payment,
        mapping={
            f: f"{f}={H}"
            for f in ("state", "last_error", "receipt", "resolved_by", "currency", "amount")
        }
        | {"attempt:1": json.dumps({"outcome": "failed", "detail": H})},
    )
    rejection = {k: H for k in ("reason", "status", "size", "remote", "sha256", "method", "at")}
    redis.lpush(keys.REJECTIONS, json.dumps(rejection))
    redis.hset(keys.STATS, f"rejected:{H}", 1)
    action = str(config["FULFILMENT_ACTION"])
    SqliteAction(action.removeprefix("sqlite:///"))(
        purchase_of(PAYMENT_KEY, 1, {"amount": "100", "currency": H, "events": EVENT_ID})
    )
    env = service_env(str(config["REDIS_URL"]), {k: str(v) for k, v in config.items()})
    return {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")}  # as when piped


def assert_literal(result: Result, code: int, *values: str) -> None:
    assert cli_ok(result, code), (result.output, result.exception)
    assert not RAW_CONTROL.search(result.stdout)
    for value in values:
        assert shown(value) in result.stdout, value


def test_event_payload_with_markup_is_printed_as_typed(hostile_ledger) -> None:
    """The issue's case: a description holding ``[/]`` made ``event ID --payload`` exit 1."""
    stored = json.loads(run_cli(hostile_ledger, "event", EVENT_ID, "--payload", "--json").stdout)
    assert json.loads(stored["payload"])["data"]["object"]["description"] == H
    result = run_cli(hostile_ledger, "event", EVENT_ID, "--payload")
    strings = [v for v in stored.values() if isinstance(v, str)]
    assert f"type={H}" in strings and f"pk={H}" in strings and f"secret={H}" in strings
    assert_literal(result, 0, *strings, *stored["deliveries_by_source"])


PAYMENT_FIELDS = ("state", "receipt", "resolved_by", "last_error")
"""Printed as stored; an unreadable amount or currency is not printed at all."""


@pytest.mark.parametrize(
    ("args", "code", "values"),
    [
        pytest.param(
            ("events",),
            0,
            (EVENT_ID, *(f"{f}={H}" for f in ("type", "pk", "secret"))),
            id="events",
        ),
        pytest.param(
            ("payments",), 0, (PAYMENT_KEY, f"state={H}", f"last_error={H}"), id="payments"
        ),
        pytest.param(
            ("payment", PAYMENT_KEY),
            0,
            (PAYMENT_KEY, EVENT_ID, H, *(f"{f}={H}" for f in PAYMENT_FIELDS)),
            id="payment",
        ),
        pytest.param(("rejections",), 0, (H,), id="rejections"),
        pytest.param(("summary",), 0, (f"rejected: {H}",), id="summary"),
        pytest.param(("downstream",), 0, (PAYMENT_KEY,), id="downstream"),
        pytest.param(("event", f"evt_no{ID}"), 1, (f"no event evt_no{ID}",), id="event-not-found"),
        pytest.param(
            ("payment", f"pi_no{ID}"), 1, (f"no payment pi_no{ID}",), id="payment-not-found"
        ),
        pytest.param(
            ("retry", f"pi_no{ID}"), 1, (f"refused: no payment pi_no{ID}",), id="retry-refused"
        ),
        pytest.param(
            ("resolve", PAYMENT_KEY, "--retry"),
            1,
            (f"refused: {PAYMENT_KEY} is state={H}, not interrupted",),
            id="resolve-refused",
        ),
    ],
)
def test_every_command_prints_outside_values_literally(
    hostile_ledger,
    args: tuple[str, ...],
    code: int,
    values: tuple[str, ...],
) -> None:
    assert_literal(run_cli(hostile_ledger, *args), code, *values)


def test_export_and_verify_print_bundle_names_literally(hostile_ledger, tmp_path: Path) -> None:
    directory = tmp_path / f"[bold]bundle{ID.replace('/', '')}"
    exported = run_cli(hostile_ledger, "export", str(directory))
    assert_literal(exported, 0, f"exported to {directory}")
    stray = f"[red]stray{ID.replace('/', '')}.json"  # an unlisted file: its name is printed
    (directory / stray).write_text("{}")
    verified = run_cli(hostile_ledger, "verify", str(directory))
    assert_literal(
        verified,
        1,
        f"FAIL event {EVENT_ID}: payload does not match its SHA-256",
        f"FAIL {stray}: in the bundle but not listed in MANIFEST.sha256",
    )


def test_replay_report_prints_outside_values_literally(capsys, monkeypatch) -> None:
    """``replay-events`` shows event files' ids and the ledger's reasons the same way."""
    from ledgerctl.checker import Findings
    from ledgerctl.replay import failing, report
    from ledgerctl.replay import main as replay_events
    from ledgerctl.terminal import safe_console

    findings = Findings(lost=[{"event": EVENT_ID}], unfulfilled=[PAYMENT_KEY])
    monkeypatch.setattr(replay_events.console, "width", 20000)
    safe_console(width=20000).print(
        report.table({"ledger": {"rejected_by_reason": {H: 1}}}, findings, findings.ok)
    )
    failing.print_failing(replay_events.console, findings, unacked=0)
    out, err = capsys.readouterr()
    assert not RAW_CONTROL.search(out + err)
    assert shown(f"rejected_by_reason {H} 1") in out and "FAILED" in out
    assert shown(f"failing: {PAYMENT_KEY}") in err
    assert shown(f"failing: {findings.lost[0]}") in err
