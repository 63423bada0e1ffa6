"""``webhook-ledger prove-action`` as a user runs it, in its own process: it starts its own
Redis, workers and sweeper, runs the configured action through the fault matrix and says
which fault applied a payment more than once."""

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest

from examples.shop import migrate as migrate_shop
from ledgerctl.prove_purchase import PROVE_EMAIL
from tests.support.broken_actions import make_every_call_shop
from tests.support.keyed_downstream import URL_ENV, KeyedDownstream
from tests.support.postgres import ORDER_SQL, make_shop
from tests.support.processes import BIN, ROOT
from workers.postgres_schema import migrate as migrate_service

FAST = {"FULFILMENT_TIMEOUT": "1", "FULFILMENT_KILL_MARGIN_SECONDS": "0.4"}
PAID_ROWS = 12
"""Duplicate and concurrent deliveries of each of the six paid types."""


def prove(
    env: dict[str, str], *options: str, timeout: float = 280
) -> tuple[int, dict[str, Any], str]:
    """Exit code, the JSON report and stderr of one run."""
    actions = ("FULFILMENT_", "REVERSAL_", "FAULT")
    environ = {k: v for k, v in os.environ.items() if not k.startswith(actions)}
    run = subprocess.run(
        [str(BIN / "webhook-ledger"), "prove-action", "--json", *options],
        env={**environ, "PYTHONPATH": str(ROOT), **FAST, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return run.returncode, json.loads(run.stdout or "{}"), run.stderr


def verdicts(report: dict[str, Any]) -> dict[str, str]:
    return {row["fault"]: row["verdict"] for row in report["rows"]}


def passed(code: int, report: dict[str, Any], stderr: str) -> None:
    """Exit 0, every fault run, every payment fulfilled exactly once."""
    assert code == 0, stderr
    assert len(report["rows"]) >= PAID_ROWS + 7
    assert set(verdicts(report).values()) == {"exactly once"}, report
    calls = {row["fault"]: row["calls"] for row in report["rows"][PAID_ROWS:]}
    # Each fault struck a call that was then made again, and applied once: killed inside
    # or after it, paused in it past its lease, its answer late, or resent.
    assert calls.pop("killed before the call") == 1
    assert set(calls.values()) == {2}, calls


def using(folder: str) -> list[int]:
    """Processes whose command line or environment names ``folder``."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            seen = (proc / "cmdline").read_bytes() + (proc / "environ").read_bytes()
        except OSError:
            continue
        if folder.encode() in seen:
            found.append(int(proc.name))
    return found


@pytest.mark.timeout(300)
def test_the_sqlite_action_passes_and_nothing_is_left_running(tmp_path: Path) -> None:
    code, report, stderr = prove(
        {"FULFILMENT_ACTION": f"sqlite:///{tmp_path / 'd.sqlite3'}"}, "--keep"
    )
    passed(code, report, stderr)
    assert "reversal_rows" not in report  # without REVERSAL_ACTION: the fulfilment rows alone
    folder = stderr.rsplit("scratch folder kept: ", 1)[1].split()[0]
    assert (Path(folder) / "redis.log").exists()
    assert using(folder) == []
    shutil.rmtree(folder)


@pytest.mark.timeout(300)
def test_the_postgres_action_passes(postgres_url: str) -> None:
    """The shop's own order rows counted (--effects-sql), one per payment."""
    make_shop(postgres_url)
    effects = "SELECT count(*) FROM shop_orders WHERE payment_key = %(payment_key)s"
    env = {"FULFILMENT_ACTION": postgres_url, "FULFILMENT_SQL": ORDER_SQL}
    code, report, stderr = prove(env, "--effects-sql", effects)
    passed(code, report, stderr)
    assert postgres_url.split("@")[0].rsplit(":", 1)[-1] not in stderr + json.dumps(report)


@pytest.mark.timeout(300)
def test_an_http_downstream_that_honours_the_idempotency_key_passes() -> None:
    with KeyedDownstream(honours=True) as downstream:
        env = {
            "FULFILMENT_ACTION": f"{downstream.base}/fulfil",
            "FULFILMENT_REPLAY_SAFE": "true",
            URL_ENV: downstream.base,
        }
        passed(*prove(env, "--effects", "tests.support.keyed_downstream:effects"))


@pytest.mark.timeout(300)
def test_an_http_downstream_ignoring_the_key_declared_replay_safe_fails() -> None:
    with KeyedDownstream(honours=False) as downstream:
        env = {
            "FULFILMENT_ACTION": f"{downstream.base}/fulfil",
            "FULFILMENT_REPLAY_SAFE": "true",
            URL_ENV: downstream.base,
        }
        code, report, stderr = prove(env, "--effects", "tests.support.keyed_downstream:effects")
    assert code == 1, stderr
    found = verdicts(report)
    assert found["killed after the call"] == "more than once"
    assert found["resent with the same idempotency key"] == "more than once"
    assert found["duplicate payment_intent.succeeded (3 in turn)"] == "exactly once"


@pytest.mark.timeout(300)
def test_a_non_idempotent_function_declared_replay_safe_is_caught(tmp_path: Path) -> None:
    shop = make_every_call_shop(str(tmp_path / "shop.sqlite3"))
    env = {
        "FULFILMENT_ACTION": "tests.support.broken_actions:insert_every_call_declared_safe",
        "SHOP_DB": shop,
    }
    code, report, stderr = prove(env, "--effects", "tests.support.broken_actions:orders_of")
    assert code == 1, stderr
    assert report["replay_safe"] is True
    found = verdicts(report)
    assert found["killed after the call"] == "more than once"
    assert "more than once" in [v for f, v in found.items() if f.startswith("downstream answered")]


@pytest.mark.timeout(300)
def test_a_function_not_replay_safe_is_at_most_once_with_interrupted(tmp_path: Path) -> None:
    """The same function, not declared replay-safe: every fault that may have applied it
    leaves the payment interrupted for a person, never a second effect."""
    shop = make_every_call_shop(str(tmp_path / "shop.sqlite3"))
    env = {"FULFILMENT_ACTION": "tests.support.broken_actions:insert_every_call", "SHOP_DB": shop}
    effects = "SELECT count(*) FROM orders WHERE payment_key = %(payment_key)s"
    code, report, stderr = prove(env, "--effects-sql", effects, "--effects-db", f"sqlite:///{shop}")
    assert code == 0, stderr
    assert report["replay_safe"] is False
    rows = {row["fault"]: row for row in report["rows"]}
    after = rows["killed after the call"]
    assert (after["state"], after["effects"], after["verdict"]) == (
        "interrupted",
        1,
        "at most once (interrupted)",
    )
    assert rows["resent with the same idempotency key"]["verdict"] == "skipped"
    assert all(row["effects"] <= 1 for row in report["rows"])


@pytest.mark.timeout(300)
def test_the_shop_s_grant_passes_and_its_rows_say_whose_they_are(postgres_url: str) -> None:
    """examples/shop's grant.sql into its entitlements: exactly once in every row, and what
    prove-action leaves in the merchant's table carries its own email and reference."""
    migrate_shop(postgres_url)
    grant = f"@{ROOT / 'examples' / 'shop' / 'grant.sql'}"
    effects = "SELECT count(*) FROM entitlements WHERE payment_key = %(payment_key)s"
    env = {"FULFILMENT_ACTION": postgres_url, "FULFILMENT_SQL": grant}
    passed(*prove(env, "--effects-sql", effects))
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute("SELECT client_reference_id, customer_email FROM entitlements")
        found = rows.fetchall()
    # a charge's: the copy Stripe made of its PaymentIntent's receipt_email
    assert {email for _, email in found} == {PROVE_EMAIL}, found
    refs = {ref for ref, _ in found if ref}  # the Checkout Sessions' rows
    assert refs and all(ref.startswith("prove-cs_") for ref in refs), found


@pytest.mark.timeout(300)
def test_an_effect_that_grants_per_line_item_is_proven_on_its_own_path(postgres_url: str) -> None:
    """Every purchase carries Checkout line items adding up to its amount: an effect that
    grants one row per line item (keyed by Stripe's line item id) runs in every row, once."""
    with psycopg.connect(postgres_url) as conn:
        conn.execute(
            "CREATE TABLE item_grants (payment_key text, line_item text PRIMARY KEY,"
            " quantity int NOT NULL, amount int NOT NULL)"
        )
    migrate_service(postgres_url)
    grant = (
        "INSERT INTO item_grants SELECT %(payment_key)s, li->>'id', (li->>'quantity')::int,"
        " (li->>'amount_total')::int FROM jsonb_array_elements(%(line_items)s::jsonb) li"
    )
    env = {"FULFILMENT_ACTION": postgres_url, "FULFILMENT_SQL": grant}
    effects = (
        "SELECT count(*) FROM item_grants WHERE payment_key = %(payment_key)s"
        " AND starts_with(line_item, 'li_prove_1_')"
    )
    passed(*prove(env, "--effects-sql", effects))
    with psycopg.connect(postgres_url) as conn:
        per_payment = conn.execute(
            "SELECT count(*), sum(quantity), min(amount) FROM item_grants GROUP BY payment_key"
        ).fetchall()
    assert len(per_payment) >= PAID_ROWS, per_payment
    assert {(n, q) for n, q, _ in per_payment} == {(2, 3)}, per_payment
    assert all(least > 0 for _, _, least in per_payment), per_payment


@pytest.mark.timeout(300)
def test_a_refused_statement_says_why_in_the_note(postgres_url: str) -> None:
    """An effect PostgreSQL refuses for these purchases (a NOT NULL column the PaymentIntent's
    purchase leaves empty): not fulfilled, and the row's note is the payment's last error."""
    with psycopg.connect(postgres_url) as conn:
        conn.execute("CREATE TABLE strict_orders (ref text NOT NULL)")
    migrate_service(postgres_url)
    env = {
        "FULFILMENT_ACTION": postgres_url,
        "FULFILMENT_SQL": "INSERT INTO strict_orders (ref) VALUES (%(client_reference_id)s)",
    }
    effects = "SELECT count(*) FROM strict_orders WHERE ref = %(payment_key)s"
    code, report, stderr = prove(env, "--effects-sql", effects, "--max-seconds", "20")
    assert code == 1, stderr
    refused = [r for r in report["rows"] if r["verdict"].startswith("not fulfilled")]
    assert refused and all("null value" in r["note"] for r in refused), refused
