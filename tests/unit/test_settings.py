"""Every setting is checked at start-up: a wrong value gives one line naming the variable,
the value it got (secrets masked) and what is allowed. One case per setting; a setting
added without a case fails test_every_setting_has_a_case."""

import re
import socket
from dataclasses import fields
from ipaddress import ip_network
from pathlib import Path

import pytest

import ledger
import workers
from ledger import setting_fields
from ledger.ports import port_in_use
from ledger.setting_fields import field_named
from ledger.setting_urls import ActionSpec
from ledger.settings import Settings, SettingsError, load
from ledgerctl.run_local import Local
from webhook import serving
from webhook.serving import Server

# name: (a good text, the value it gives, a wrong text, words of what is allowed)
CASES: dict[str, tuple[str, object, str, str]] = {
    "REDIS_URL": ("rediss://:pw@r.example:6380/3", None, "redis://127.0.0.1:6389/99", "db 0-15"),
    "REDIS_SOCKET_TIMEOUT": ("0.5", 0.5, "0", "a number of seconds, above 0 up to 300"),
    "REDIS_RETRIES": ("0", 0, "three", "a whole number, from 0 to 100"),
    "REDIS_MAX_CONNECTIONS": ("8", 8, "0", "from 1 to 10000"),
    "REDIS_SENTINELS": (
        "10.0.0.1:26379, s-b:26380",
        (("10.0.0.1", 26379), ("s-b", 26380)),
        "127.0.0.1",
        "host:port",
    ),
    "REDIS_SENTINEL_MASTER": ("ledger-eu", "ledger-eu", "my ledger", "letters, digits"),
    "REDIS_SENTINEL_PASSWORD": ("s3nt", "s3nt", "s3nt ", "without spaces around it"),
    "REDIS_PASSWORD": ("r3dis", "r3dis", "r3dis\n", "a token"),
    "REDIS_SENTINEL_TLS": ("true", True, "maybe", "true or false"),
    "REDIS_SENTINEL_DB": ("3", 3, "16", "from 0 to 15"),
    "LEDGER_MIN_REPLICAS": ("2", 2, "-1", "a whole number, from 0 to 100"),
    "LEDGER_WAIT_TIMEOUT": ("0.5", 0.5, "0", "seconds, from 0.001 to 300"),
    "STRIPE_WEBHOOK_SECRET": ("whsec_a, whsec_b", ("whsec_a", "whsec_b"), "sk_test_abc", "whsec_"),
    "STRIPE_WEBHOOK_SECRET_LABELS": ("cli", ("cli",), "cli,,local", "one label per secret"),
    "STRIPE_WEBHOOK_TOLERANCE": ("0", 0, "abc", "a whole number of seconds, 0 or more"),
    "SECRET_RETIRE_AFTER_DAYS": ("14", 14, "0", "days, 1 or more"),
    "MAX_BODY_BYTES": ("1024", 1024, "1e6", "bytes, from 1 to 67108864"),
    "BODY_READ_TIMEOUT": ("2.5", 2.5, "-1", "seconds, above 0"),
    "ANSWER_WRITE_TIMEOUT": ("2.5", 2.5, "301", "seconds, above 0 up to 300"),
    "EVENT_RETENTION_DAYS": ("7", 7, "0", "days, 1 or more"),
    "PAYMENT_RETENTION_DAYS": ("0", 0, "-30", "0 or more (0: keep)"),
    "OPS_TOKEN": (
        "s3cret-token,tok-b",
        ("s3cret-token", "tok-b"),
        "tok ",
        "tokens, comma-separated, without spaces",
    ),
    "OPS_TOKEN_LABELS": ("alice,deploy-bot", ("alice", "deploy-bot"), "alice,,bob", "one label"),
    "METRICS_TOKEN": ("m3trics", "m3trics", "a\tb", "a token"),
    "QUEUE_NAME": ("fulfil-eu", "fulfil-eu", "my queue", "letters, digits"),
    "RQ_RESULT_TTL": ("3600", 3600, "-1", "0 or more"),
    "FULFILMENT_ACTION": (
        "shop.actions:fulfil",
        ActionSpec("callable", "shop.actions:fulfil"),
        "foo://x",
        "module:function",
    ),
    "FULFILMENT_SQL": ("@effect.sql", "@effect.sql", "@", "one SQL statement, or @path"),
    "FULFILMENT_EFFECT": ("shop.effects:grant", "shop.effects:grant", "shop.effects", "module:"),
    "FULFILMENT_REPLAY_SAFE": ("yes", True, "ture", "true or false"),
    "REVERSAL_ACTION": (
        "shop.actions:take_back",
        ActionSpec("callable", "shop.actions:take_back"),
        "foo://x",
        "module:function",
    ),
    "REVERSAL_REPLAY_SAFE": ("yes", True, "ture", "true or false"),
    "REVERSAL_SQL": ("@undo.sql", "@undo.sql", "@", "one SQL statement, or @path"),
    "REVERSAL_EFFECT": ("shop.effects:undo", "shop.effects:undo", "shop.effects", "module:"),
    "REVERSAL_PER_REFUND": ("yes", True, "each", "true or false"),
    "REVERSAL_DISPUTE_WON": ("FULFIL", "fulfil", "refund", "one of hold, fulfil"),
    "FULFILMENT_TIMEOUT": ("5", 5.0, "inf", "above 0"),
    "LEASE_SECONDS": ("60", 60, "2.5", "a whole number of seconds"),
    "FULFILMENT_CONCURRENCY": ("16", 16, "0", "a whole number, from 1 to 256"),
    "FULFILMENT_KILL_MARGIN_SECONDS": ("1", 1.0, "0", "above 0"),
    "MAX_ATTEMPTS": ("3", 3, "-1", "from 1 to 1000"),
    "RETRY_BASE_SECONDS": ("0.1", 0.1, "nan", "0.001 or more"),
    "RETRY_MAX_SECONDS": ("60", 60.0, "0", "0.001 or more"),
    "BREAKER_THRESHOLD": ("0", 0, "1001", "from 0 to 1000 (0: off)"),
    "BREAKER_COOLDOWN_SECONDS": ("0.5", 0.5, "0.0009", "from 0.001 to 3600"),
    "BREAKER_MAX_RETRY_AFTER_SECONDS": ("60", 60, "0", "from 1 to 86400"),
    "FULFILMENT_MAX_RATE": ("10", 10, "-1", "from 0 to 10000 (0: no limit)"),
    "QUEUED_GRACE_SECONDS": ("5", 5, "0", "1 or more"),
    "SWEEP_INTERVAL": ("0.5", 0.5, "0", "above 0"),
    "PAID_EVENT_TYPES": ("invoice.paid", ("invoice.paid",), "charge.refunded", "one or more of"),
    "FULFIL_UNLINKED_INVOICES": ("on", True, "maybe", "true or false"),
    "STRIPE_MODE": ("TEST", "test", "prod", "one of live, test, any"),
    "FULFIL_CONNECT": ("0", False, "2", "true or false"),
    "STUCK_QUEUED_SECONDS": ("60", 60, "soon", "1 or more"),
    "STRIPE_API_KEY": ("rk_live_abc", "rk_live_abc", "pk_live_abc", "sk_… or rk_…"),
    "STRIPE_API_BASE": ("http://127.0.0.1:9", None, "api.stripe.com", "http:// or https://"),
    "RECONCILE_INTERVAL": ("0", 0.0, "0.0004", "0 (never) or 0.001 or more"),
    "CHECKOUT_LINE_ITEMS": ("no", False, "some", "true or false"),
    "INVOICE_LINES": ("off", False, "all", "true or false"),
    "CHECKOUT_WAIT_SECONDS": ("5", 5.0, "3601", "0 (none) or from 0.001 to 3600"),
    "STRIPE_API_MAX_RATE": ("25", 25, "0", "from 1 to 10000"),
    "CONNECTIONS_PER_ADDRESS": ("0", 0, "-1", "from 0 to 100000 (0: no cap)"),
    "CONNECTIONS_PER_ADDRESS_IPV6_PREFIX": ("48", 48, "31", "bits, from 32 to 128"),
    "REQUESTS_PER_CONNECTION": ("1", 1, "0", "from 1 to 1000000"),
    "CONNECTION_LIFETIME": ("2.5", 2.5, "0", "above 0 up to 86400"),
    "TRUSTED_PROXIES": (
        "10.0.0.0/8, ::1",
        (ip_network("10.0.0.0/8"), ip_network("::1")),
        "10.0.0.0/8,proxy",
        "networks",
    ),
}
# The web process's own (webhook/serving.py) and scripts/run.sh's (ledgerctl/run_local.py).
OTHER_CASES: dict[type, dict[str, tuple[str, object, str, str]]] = {
    Server: {
        "WEB_PORT": ("8080", 8080, "80a", "from 1 to 65535"),
        "PORT": ("5000", 5000, "70000", "from 1 to 65535"),
        "HOST": ("[::]", "[::]", "local host", "a host name or address"),
        "WEB_CONCURRENCY": ("4", 4, "0", "from 1 to 256"),
        "GUNICORN_WORKER_CONNECTIONS": ("100", 100, "many", "from 1 to 100000"),
        "GUNICORN_THREADS": ("8", 8, "0", "from 1 to 1024"),
        "GUNICORN_REUSE_PORT": ("off", False, "both", "true or false"),
        "LOG_LEVEL": ("warning", "warning", "loud", "one of debug, info"),
    },
    Local: {
        "WORKERS": ("3", 3, "0", "from 1 to 64"),
        "REDIS_PORT": ("7000", 7000, "-1", "from 1 to 65535"),
    },
}
FREE_TEXT = {"GUNICORN_WORKER_CLASS", "GUNICORN_ACCESS_LOG"}
"""Any text reads; the worker class is then checked as gunicorn loads it (test_serving.py),
the access log as gunicorn opens it (ledger/setting_files.py, test_setting_files.py)."""
# What a wrong value of these shows instead of itself.
MASKED = {
    "STRIPE_WEBHOOK_SECRET": "'sk_test_***'",
    "OPS_TOKEN": "'***'",
    "REDIS_SENTINEL_PASSWORD": "'***'",
    "REDIS_PASSWORD": "'***'",
    "METRICS_TOKEN": "'***'",
    "STRIPE_API_KEY": "'pk_live_***'",
}


BESIDE = {
    "REVERSAL_SQL": {"REVERSAL_ACTION": "sqlite:///r.sqlite3"},
    "REVERSAL_EFFECT": {"REVERSAL_ACTION": "sqlite:///r.sqlite3"},
    "REVERSAL_REPLAY_SAFE": {"REVERSAL_ACTION": "sqlite:///r.sqlite3"},
    "REVERSAL_PER_REFUND": {"REVERSAL_ACTION": "sqlite:///r.sqlite3"},
    "REVERSAL_DISPUTE_WON": {"REVERSAL_ACTION": "sqlite:///r.sqlite3"},
}
"""What a setting is only accepted beside (the rules between settings)."""


def all_cases() -> list[tuple[type, str, tuple[str, object, str, str]]]:
    found: list[tuple[type, str, tuple[str, object, str, str]]] = [
        (Settings, name, case) for name, case in CASES.items()
    ]
    return found + [(cls, n, c) for cls, cases in OTHER_CASES.items() for n, c in cases.items()]


def problems(cls: type, env: dict[str, str]) -> list[str]:
    if cls is Settings:
        try:
            load({**BESIDE.get(next(iter(env), ""), {}), **env})
        except SettingsError as exc:
            return exc.problems
        return []
    return setting_fields.read(fields(cls), env)[1]


def value_of(cls: type, name: str, text: str) -> object:
    if cls is Settings:
        return getattr(load({**BESIDE.get(name, {}), name: text}), name)
    return setting_fields.read(fields(cls), {name: text})[0][name]


def test_every_setting_has_a_case() -> None:
    assert {f.name for f in fields(Settings)} == set(CASES)
    for cls, cases in OTHER_CASES.items():
        assert {f.name for f in fields(cls)} - FREE_TEXT == set(cases)


@pytest.mark.parametrize(
    ("cls", "name", "case"), all_cases(), ids=[f"{c.__name__}.{n}" for c, n, _ in all_cases()]
)
def test_a_setting_takes_a_good_value_and_names_a_wrong_one(
    cls: type, name: str, case: tuple[str, object, str, str]
) -> None:
    good, value, wrong, allowed = case
    assert value_of(cls, name, good) == (good if value is None else value)
    lines = problems(cls, {name: wrong})
    assert len(lines) == 1, lines
    shown = MASKED.get(name, wrong if wrong.isprintable() and " " not in wrong else None)
    assert lines[0].startswith(f"invalid setting {name}={shown or ''}"), lines[0]
    assert allowed in lines[0] and "\n" not in lines[0]


def test_an_empty_value_means_the_default() -> None:
    assert load({"MAX_ATTEMPTS": "", "REDIS_URL": "", "FULFIL_CONNECT": ""}) == Settings()


def in_milliseconds() -> set[str]:
    """The settings the code turns into whole milliseconds (``NAME * 1000``) for Redis or a
    Lua script, found in the source of ledger/ and workers/."""
    names = {f.name for f in fields(Settings)}
    found: set[str] = set()
    for package in (ledger, workers):
        for path in Path(package.__file__).parent.rglob("*.py"):
            found.update(re.findall(r"\b([A-Z][A-Z0-9_]+)\s*\*\s*1000\b", path.read_text()))
    return found & names


IN_MILLISECONDS = sorted(in_milliseconds())


def test_the_settings_taken_in_milliseconds_are_found() -> None:
    known = {"BREAKER_COOLDOWN_SECONDS", "LEDGER_WAIT_TIMEOUT", "RETRY_BASE_SECONDS"}
    assert known <= set(IN_MILLISECONDS), IN_MILLISECONDS


@pytest.mark.parametrize("name", IN_MILLISECONDS)
@pytest.mark.parametrize("text", ["0.0009", "0.0001", "1e-7", "0.000999999"])
def test_no_setting_taken_in_milliseconds_becomes_0_ms(name: str, text: str) -> None:
    """Regression: BREAKER_COOLDOWN_SECONDS=0.0009 was accepted, became a 0 ms cool-down
    that gate.lua refuses, and every job failed. Every duration the code passes in whole
    milliseconds is refused at start-up, naming it, when it would arrive as 0 ms."""
    lines = problems(Settings, {name: text, "STRIPE_API_KEY": "rk_test_1"})  # reconcile may run
    assert len(lines) == 1 and lines[0].startswith(f"invalid setting {name}={text}:"), lines


@pytest.mark.parametrize("name", IN_MILLISECONDS)
def test_a_millisecond_is_taken_wherever_a_fraction_is(name: str) -> None:
    kind = field_named(Settings, name).metadata["kind"]
    if "whole number" not in kind.allowed:
        assert int(kind.parse("0.001") * 1000) == 1


def test_every_problem_is_a_line_of_its_own() -> None:
    env = {"STRIPE_WEBHOOK_TOLERANCE": "abc", "MAX_ATTEMPTS": "-1", "STRIPE_MODE": "prod"}
    with pytest.raises(SettingsError) as refused:
        load(env, require=("STRIPE_WEBHOOK_SECRET",))
    assert [line.split(":")[0] for line in refused.value.problems] == [
        "missing setting STRIPE_WEBHOOK_SECRET",
        "invalid setting STRIPE_WEBHOOK_TOLERANCE=abc",
        "invalid setting MAX_ATTEMPTS=-1",
        "invalid setting STRIPE_MODE=prod",
    ]


@pytest.mark.parametrize(
    ("env", "line"),
    [
        (
            {"LEASE_SECONDS": "10", "FULFILMENT_TIMEOUT": "10"},
            "invalid setting LEASE_SECONDS=10: expected at least FULFILMENT_TIMEOUT (10) + 2",
        ),
        (
            {"FULFILMENT_TIMEOUT": "29"},  # the default lease (30) is named too
            "invalid setting LEASE_SECONDS=30: expected at least FULFILMENT_TIMEOUT (29) + 2",
        ),
        (
            {
                "LEASE_SECONDS": "12",
                "FULFILMENT_TIMEOUT": "10",
                "FULFILMENT_KILL_MARGIN_SECONDS": "1",
            },
            "invalid setting FULFILMENT_KILL_MARGIN_SECONDS=1: expected FULFILMENT_TIMEOUT (10)"
            " + 2 x 1 under LEASE_SECONDS (12)",
        ),
        (
            {"PAYMENT_RETENTION_DAYS": "30"},
            "invalid setting PAYMENT_RETENTION_DAYS=30: expected 0 (keep) or more than",
        ),
        (
            {"RETRY_BASE_SECONDS": "10", "RETRY_MAX_SECONDS": "5"},
            "invalid setting RETRY_MAX_SECONDS=5: expected at least RETRY_BASE_SECONDS (10)",
        ),
        (
            {"RECONCILE_INTERVAL": "60"},
            "invalid setting RECONCILE_INTERVAL=60: expected 0 (never) while STRIPE_API_KEY",
        ),
        (
            {"CHECKOUT_LINE_ITEMS": "true"},
            "invalid setting CHECKOUT_LINE_ITEMS=true: expected false while STRIPE_API_KEY",
        ),
        (
            {"INVOICE_LINES": "true"},
            "invalid setting INVOICE_LINES=true: expected false while STRIPE_API_KEY",
        ),
        (
            {"STRIPE_WEBHOOK_SECRET": "whsec_a", "STRIPE_WEBHOOK_SECRET_LABELS": "cli,local"},
            "invalid setting STRIPE_WEBHOOK_SECRET_LABELS=cli,local: 2 labels for 1 secrets",
        ),
        (
            {"OPS_TOKEN": "tok-a,tok-b", "OPS_TOKEN_LABELS": "alice"},
            "invalid setting OPS_TOKEN_LABELS=alice: 1 labels for 2 tokens; expected one label",
        ),
        (
            {"OPS_TOKEN": "tok-a,tok-b", "OPS_TOKEN_LABELS": "alice,alice"},
            "invalid setting OPS_TOKEN_LABELS=alice,alice: two tokens share the label alice",
        ),
        (
            {"REDIS_SENTINELS": "a:26379", "REDIS_URL": "redis://:pw@h:6379/3"},
            "invalid setting REDIS_URL='redis://***@h:6379/3': unused with REDIS_SENTINELS, yet"
            " it names database 3: expected unset, with REDIS_SENTINEL_DB=3",
        ),
        (
            {
                "REDIS_SENTINELS": "a:26379",
                "REDIS_URL": "rediss://h:6379",
                "REDIS_SENTINEL_DB": "2",
            },
            "invalid setting REDIS_URL=rediss://h:6379: unused with REDIS_SENTINELS, yet it names"
            " database 0 over TLS: expected unset, with REDIS_SENTINEL_DB=0 and"
            " REDIS_SENTINEL_TLS=true",
        ),
        (
            {"OPS_TOKEN": "tok-a, tok-a"},
            "invalid setting OPS_TOKEN='***,***': the same token given twice",
        ),
        (
            {"FULFILMENT_SQL": "SELECT 1", "FULFILMENT_EFFECT": "shop:grant"},
            "invalid setting FULFILMENT_EFFECT=shop:grant: expected FULFILMENT_SQL or",
        ),
        (
            {"FULFILMENT_ACTION": "http://127.0.0.1:9/f", "FULFILMENT_SQL": "SELECT 1"},
            "invalid setting FULFILMENT_SQL='SELECT 1': expected unset while FULFILMENT_ACTION",
        ),
        (
            {"REVERSAL_ACTION": "shop:take_back", "REVERSAL_SQL": "SELECT 1"},
            "invalid setting REVERSAL_SQL='SELECT 1': expected unset while REVERSAL_ACTION",
        ),
        (
            {"REVERSAL_ACTION": "shop:take_back", "REVERSAL_EFFECT": "shop:undo"},
            "invalid setting REVERSAL_EFFECT=shop:undo: expected unset while REVERSAL_ACTION",
        ),
        (
            {
                "REVERSAL_ACTION": "sqlite:///r.sqlite3",
                "REVERSAL_SQL": "SELECT 1",
                "REVERSAL_EFFECT": "shop:undo",
            },
            "invalid setting REVERSAL_EFFECT=shop:undo: expected REVERSAL_SQL or",
        ),
        (
            {"REVERSAL_SQL": "garbage"},
            "invalid setting REVERSAL_SQL=garbage: REVERSAL_ACTION is not set, so it would never"
            " run: expected REVERSAL_ACTION naming the database (FULFILMENT_ACTION's URL to"
            " revoke in the same database), or this unset",
        ),
        (
            {"FULFILMENT_ACTION": "postgresql://u:pw@db/shop", "REVERSAL_EFFECT": "x:y"},
            "invalid setting REVERSAL_EFFECT=x:y: REVERSAL_ACTION is not set",
        ),
        (
            {"REVERSAL_PER_REFUND": "yes"},
            "invalid setting REVERSAL_PER_REFUND=yes: REVERSAL_ACTION is not set, so no payment"
            " is reversed and this would change nothing: expected REVERSAL_ACTION naming what"
            " takes a payment back (docs/REVERSAL.md), or this unset",
        ),
        (
            {"FULFILMENT_ACTION": "shop:grant", "REVERSAL_DISPUTE_WON": "fulfil"},
            "invalid setting REVERSAL_DISPUTE_WON=fulfil: REVERSAL_ACTION is not set, so no",
        ),
        (
            {"FULFILMENT_REPLAY_SAFE": "true", "REVERSAL_REPLAY_SAFE": "true"},
            "invalid setting REVERSAL_REPLAY_SAFE=true: REVERSAL_ACTION is not set, so no",
        ),
        (
            {"FULFILMENT_ACTION": "shop.actions:fulfil", "FULFILMENT_EFFECT": "shop:grant"},
            "invalid setting FULFILMENT_EFFECT=shop:grant: expected unset while FULFILMENT_ACTION",
        ),
        (
            {"FULFILMENT_ACTION": "postgresql://u:pw@db.example:5432", "FULFILMENT_SQL": "x"},
            "invalid setting FULFILMENT_ACTION='postgresql://***@db.example:5432': no database",
        ),
    ],
)
def test_rules_between_settings_name_the_setting_to_change(env: dict[str, str], line: str) -> None:
    with pytest.raises(SettingsError) as refused:
        load(env)
    assert len(refused.value.problems) == 1 and refused.value.problems[0].startswith(line)


@pytest.mark.parametrize(
    ("env", "tokens", "labels"),
    [
        ({}, [], []),
        ({"OPS_TOKEN": "tok-a"}, ["tok-a"], ["default"]),
        (
            {"OPS_TOKEN": "tok-a, tok-b,tok-c"},
            ["tok-a", "tok-b", "tok-c"],
            ["token1", "token2", "token3"],
        ),
        (
            {"OPS_TOKEN": "tok-a,tok-b", "OPS_TOKEN_LABELS": "alice, ci"},
            ["tok-a", "tok-b"],
            ["alice", "ci"],
        ),
    ],
)
def test_each_ops_token_has_a_label(
    env: dict[str, str], tokens: list[str], labels: list[str]
) -> None:
    s = load(env)
    assert (list(s.OPS_TOKEN), s.ops_token_labels) == (tokens, labels)


def test_an_ops_token_label_is_a_plain_name() -> None:
    (line,) = problems(Settings, {"OPS_TOKEN": "tok-a", "OPS_TOKEN_LABELS": "alice smith"})
    assert line.startswith("invalid setting OPS_TOKEN_LABELS") and "A-Z a-z 0-9" in line


def test_a_rule_is_skipped_when_one_of_its_settings_is_wrong_itself() -> None:
    with pytest.raises(SettingsError) as refused:
        load({"LEASE_SECONDS": "abc", "FULFILMENT_TIMEOUT": "40"})
    assert len(refused.value.problems) == 1 and "LEASE_SECONDS=abc" in refused.value.problems[0]


def test_a_required_setting_must_be_set() -> None:
    with pytest.raises(SettingsError, match="^missing setting STRIPE_WEBHOOK_SECRET: expected"):
        load({}, require=("STRIPE_WEBHOOK_SECRET",))
    assert (
        load({}).STRIPE_WEBHOOK_SECRET == ()
    )  # the worker, sweeper and CLI need no webhook secret


def test_overrides_are_checked_like_the_environment() -> None:
    assert load({}, PAID_EVENT_TYPES=("invoice.paid",), FULFIL_CONNECT=True).FULFIL_CONNECT
    with pytest.raises(SettingsError, match="MAX_ATTEMPTS=0"):
        load({}, MAX_ATTEMPTS=0)
    with pytest.raises(TypeError, match="NOT_A_SETTING"):
        load({}, NOT_A_SETTING=1)


@pytest.mark.parametrize(
    ("env", "bind"),
    [
        ({}, "127.0.0.1:8000"),
        ({"PORT": "5000"}, "0.0.0.0:5000"),  # a platform's PORT: every interface, as gunicorn
        ({"PORT": "5000", "HOST": "127.0.0.1"}, "127.0.0.1:5000"),
        ({"PORT": "5000", "WEB_PORT": "8001"}, "127.0.0.1:8001"),  # honcho's PORT under run.sh
    ],
)
def test_the_web_process_listens_on_web_port_else_the_platforms_port(
    env: dict[str, str], bind: str
) -> None:
    values, found = setting_fields.read(fields(Server), env)
    assert found == [] and Server(**values).bind == bind  # type: ignore[arg-type]


def test_port_in_use_names_a_taken_port_and_passes_a_free_one() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert port_in_use(f"127.0.0.1:{port}") == (
            f"cannot listen on 127.0.0.1:{port}: Address already in use"
        )
        assert port_in_use(f"0.0.0.0:{port}") is not None  # the wildcard overlaps it
    assert port_in_use(f"127.0.0.1:{port}") is None  # closed: free again
    assert port_in_use("unix:/run/webhook.sock") is None  # not host:port: gunicorn's to say


@pytest.mark.parametrize(("setting", "warns"), [("0\n", True), ("1\n", False), (None, True)])
def test_a_socket_per_worker_warns_unless_the_kernel_migrates_queued_connections(
    setting: str | None, warns: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sysctl = tmp_path / "tcp_migrate_req"  # None: a kernel without it (before 5.14)
    if setting is not None:
        sysctl.write_text(setting)
    monkeypatch.setattr(serving, "MIGRATE_REQUESTS", sysctl)
    assert (serving.reuse_port_caveat() is not None) == warns


@pytest.mark.parametrize(
    ("env", "mode"),
    [
        ({}, "0"),
        ({"REVERSAL_ACTION": "shop:take_back"}, "1"),
        ({"REVERSAL_ACTION": "shop:take_back", "REVERSAL_PER_REFUND": "true"}, "1 each"),
        ({"REVERSAL_ACTION": "shop:take_back", "REVERSAL_DISPUTE_WON": "fulfil"}, "1 refulfil"),
    ],
)
def test_the_scripts_reversal_mode(env: dict[str, str], mode: str) -> None:
    assert load(env).reversal_mode == mode


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (":rEdIsPw7Q9zX@127.0.0.1:26379", "'***@127.0.0.1:26379'"),
        ("10.0.0.1:26379,user:rEdIsPw7Q9zX@s-b:26380", "'10.0.0.1:26379,***@s-b:26380'"),
        ("s-a:1,:rEdIs,Pw7Q9zX@s-b:26380", "'s-a:1,***,***@s-b:26380'"),
    ],
)
def test_a_password_given_in_redis_sentinels_is_masked(text: str, shown: str) -> None:
    """A Sentinel's password belongs in REDIS_SENTINEL_PASSWORD; one pasted before an
    address as in a URL is masked as a URL's is (commas in it too), and never quoted in
    why the address is wrong."""
    lines = problems(Settings, {"REDIS_SENTINELS": text})
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"invalid setting REDIS_SENTINELS={shown}: "), lines[0]
    assert "rEdIs" not in lines[0] and "Pw7Q9zX" not in lines[0]
