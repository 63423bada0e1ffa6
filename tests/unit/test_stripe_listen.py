"""The ``stripe listen`` commands the banner and the README give: their event lists are the
event table's, with the refund and dispute types when REVERSAL_ACTION is set, and run.sh
--stripe-cli adds the CLI's secret under the ``cli`` label."""

import re
import shlex
import subprocess

import pytest

from ledger.events import PREFIX_MEMBERS, RULES, THIN_RULES, rule_for
from ledger.settings import load
from ledger.subscriptions import REFUND_TYPES, forwarded_types
from ledgerctl import stripe_listen
from ledgerctl.banner import banner
from tests.support.processes import ROOT

SNAPSHOT, THIN = forwarded_types(reversal=True)
PLAIN, _ = forwarded_types(reversal=False)
DEFAULT_FORWARD = "127.0.0.1:8000/webhooks/stripe"
REVERSING = {"REVERSAL_ACTION": "sqlite:///var/reversals.sqlite3"}


def events_of(command: str) -> tuple[str, ...]:
    args = shlex.split(command)
    return tuple(args[args.index("--events") + 1].split(","))


def test_the_lists_are_the_tables() -> None:
    exact = {t for t in RULES if not t.endswith(".")}
    members = {m for group in PREFIX_MEMBERS.values() for m in group}
    assert set(SNAPSHOT) == exact | members and len(SNAPSHOT) == len(exact | members)
    assert set(PLAIN) == exact and len(PLAIN) == len(exact)
    assert set(THIN) == {t for t in THIN_RULES if not t.endswith(".")}
    assert not {t for t in SNAPSHOT if t.startswith("v1.")}  # the CLI's thin-type pattern


def test_every_prefix_rule_that_changes_a_payment_lists_its_types() -> None:
    acting = {p for p, rule in RULES.items() if p.endswith(".") and rule.role != "info"}
    assert set(PREFIX_MEMBERS) == acting
    for prefix, group in PREFIX_MEMBERS.items():
        assert group and all(rule_for(member) is RULES[prefix] for member in group), prefix


def printed_by_the_banner(env: dict[str, str]) -> list[str]:
    settings = load({"STRIPE_WEBHOOK_SECRET": "whsec_local", **env})
    text = banner({}, settings, "whsec_local", dev_token="tok")
    printed = [line.strip() for line in text.splitlines() if "stripe listen --events" in line]
    return [line.removeprefix("forward with").strip() for line in printed]


@pytest.mark.parametrize(("env", "snapshot"), [({}, PLAIN), (REVERSING, SNAPSHOT)])
def test_the_banner_prints_the_table_in_two_commands(env: dict, snapshot: tuple) -> None:
    printed = printed_by_the_banner(env)
    assert [events_of(c) for c in printed] == [snapshot, THIN]
    assert printed == stripe_listen.forward_commands(DEFAULT_FORWARD, bool(env))
    assert all(c.endswith(f"--forward-to {DEFAULT_FORWARD}") for c in printed)


def test_the_refund_and_dispute_types_follow_reversal_action() -> None:
    """Without a reversal action only charge.refunded (a full refund keeps a payment refunded
    before its fulfilment from being fulfilled); with one, every refund and dispute type."""
    plain, reversing = events_of(printed_by_the_banner({})[0]), set(SNAPSHOT)
    assert set(REFUND_TYPES) <= reversing and set(REFUND_TYPES) & set(plain) == {"charge.refunded"}
    assert {"charge.dispute.closed", "refund.updated", "charge.refund.updated"} <= reversing


def test_the_readme_gives_the_same_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    shown = re.findall(r"^(stripe listen --events .*)$", readme, re.M)
    assert shown == stripe_listen.forward_commands(DEFAULT_FORWARD, False)


@pytest.mark.parametrize("reversal", [False, True])
def test_run_sh_processes_read_the_api_base_only_from_stripe_api_base(reversal: bool) -> None:
    plain = stripe_listen.processes({}, DEFAULT_FORWARD, reversal)
    assert list(plain) == ["stripe-listen", "stripe-listen-thin"]
    listens = [c.split(" 2>&1 | ")[0] for c in plain.values()]
    assert [events_of(c) for c in listens] == [SNAPSHOT if reversal else PLAIN, THIN]
    assert all("--skip-update" in c and "--api-base" not in c for c in listens)
    based = stripe_listen.processes(
        {"STRIPE_API_BASE": "http://127.0.0.1:9"}, DEFAULT_FORWARD, reversal
    )
    assert all("--api-base http://127.0.0.1:9 2>&1 | " in c for c in based.values())


def test_the_cli_output_is_shown_with_its_secret_masked() -> None:
    ready = "Ready! Your webhook signing secret is whsec_abc_0123456789DEF (^C to quit)\n"
    command = f"printf %s '{ready}' | {stripe_listen.mask_command()}"
    shown = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    assert shown.stdout == ready.replace("whsec_abc_0123456789DEF", "whsec_***")


@pytest.mark.parametrize(
    ("secrets", "labels", "wanted"),
    [
        ("", "", ("whsec_cli", "cli")),
        ("whsec_a", "dashboard", ("whsec_a,whsec_cli", "dashboard,cli")),
        ("whsec_cli", "", ("whsec_cli", "")),  # already there: left as it is
    ],
)
def test_the_cli_secret_is_labelled_cli(secrets: str, labels: str, wanted: tuple) -> None:
    env = {"STRIPE_WEBHOOK_SECRET": secrets, "STRIPE_WEBHOOK_SECRET_LABELS": labels}
    got = stripe_listen.with_cli_secret(env, "whsec_cli")
    assert (got["STRIPE_WEBHOOK_SECRET"], got["STRIPE_WEBHOOK_SECRET_LABELS"]) == wanted


def test_unlabelled_secrets_are_refused_rather_than_mislabelled() -> None:
    env = {"STRIPE_WEBHOOK_SECRET": "whsec_a,whsec_b", "STRIPE_WEBHOOK_SECRET_LABELS": ""}
    with pytest.raises(stripe_listen.Refused, match="STRIPE_WEBHOOK_SECRET_LABELS"):
        stripe_listen.with_cli_secret(env, "whsec_cli")


def test_no_cli_on_path_is_one_line() -> None:
    with pytest.raises(stripe_listen.Refused) as refused:
        stripe_listen.print_secret({"PATH": "/nonexistent"})
    assert "no `stripe` on PATH" in str(refused.value) and "\n" not in str(refused.value)


def test_run_sh_processes_start_the_cli_only_once_their_wait_succeeds() -> None:
    """`wait && stripe listen … 2>&1 | mask`: sh binds the pipeline first, so a failed wait
    starts neither the CLI nor its filter."""
    waiting = stripe_listen.processes({}, DEFAULT_FORWARD, False, wait="false")
    assert all(c.startswith("false && stripe listen ") for c in waiting.values())
    command = waiting["stripe-listen"].replace("stripe listen", "echo started", 1)
    shown = subprocess.run(["sh", "-c", command], capture_output=True, text=True)
    assert (shown.returncode, shown.stdout) == (1, "")
    command = command.replace("false && ", "true && ", 1)
    shown = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    assert shown.stdout.startswith("started --events ")
