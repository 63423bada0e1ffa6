"""A variable that is no setting but a slip of one's name (a case slip, a letter added,
dropped, changed or swapped, the US spelling of FULFILMENT) stops every process with one
line naming it and the setting it was meant to be, never its value; the platform's own
variables and every one the project's scripts and tests set pass."""

import re
from dataclasses import fields
from pathlib import Path

import pytest

from ledger.setting_fields import meant
from ledger.settings import ELSEWHERE, KNOWN, SettingsError, load
from ledgerctl.run_local import Local
from webhook.serving import Server

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("name", "setting"),
    [
        ("FULFILLMENT_SQL", "FULFILMENT_SQL"),
        ("FULFILLMENT_ACTION", "FULFILMENT_ACTION"),
        ("FULLFILMENT_EFFECT", "FULFILMENT_EFFECT"),
        ("FULFILL_CONNECT", "FULFIL_CONNECT"),
        ("REVERSAL_SQl", "REVERSAL_SQL"),
        ("reversal_action", "REVERSAL_ACTION"),
        ("REVERSAL_ACTIONS", "REVERSAL_ACTION"),
        ("REDSI_URL", "REDIS_URL"),
        ("REDIS_URLS", "REDIS_URL"),
        ("OPS_TOKENS", "OPS_TOKEN"),
        ("STRIPE_WEBHOOK_SECRETS", "STRIPE_WEBHOOK_SECRET"),
        ("LEASE_SECOND", "LEASE_SECONDS"),
        ("GUNICORN_THREAD", "GUNICORN_THREADS"),
        ("WEB_PROT", "WEB_PORT"),
        ("Host", "HOST"),
    ],
)
def test_a_slip_of_a_setting_name_is_taken_for_it(name: str, setting: str) -> None:
    assert meant(name, KNOWN) == setting


PLATFORM = """PATH HOME PWD OLDPWD USER LOGNAME SHELL TERM LANG TZ TMPDIR HOSTNAME PYTHONPATH
PYTHONUNBUFFERED PYTHONDONTWRITEBYTECODE VIRTUAL_ENV PORT0 PORT1 DYNO DATABASE_URL
RQ_REDIS_URL REDIS_HOST REDIS_DB REDIS_SERVICE_HOST REDIS_SERVICE_PORT WEB_SERVICE_PORT
REDIS_TLS_URL REDISCLOUD_URL GUNICORN_CMD_ARGS FLASK_APP FLASK_DEBUG SENTRY_DSN
PROMETHEUS_MULTIPROC_DIR HTTP_PROXY HTTPS_PROXY NO_PROXY SSL_CERT_FILE REQUESTS_CA_BUNDLE
STRIPE_SECRET_KEY STRIPE_PUBLISHABLE_KEY STRIPE_API_VERSION STRIPE_DEVICE_NAME
PGHOST PGPORT PGUSER PGPASSWORD PGDATABASE PYTEST_XDIST_WORKER PYTEST_CURRENT_TEST""".split()


def project_variables() -> set[str]:
    """Every variable the project's scripts set or read, and every one its tests give a
    process (a key of an environment, or a keyword of a helper that makes one)."""
    shell = [*ROOT.glob("scripts/*.sh"), *ROOT.glob("Procfile*"), ROOT / ".ci" / "run"]
    shell += [*ROOT.glob("examples/**/*.sh"), *ROOT.glob("bench/*.sh")]
    found: set[str] = set()
    for path in shell:
        text = path.read_text()
        found |= set(re.findall(r"\b([A-Z][A-Z0-9_]+)=", text))
        found |= set(re.findall(r"\$\{?([A-Z][A-Z0-9_]+)", text))
    for path in ROOT.glob("tests/**/*.py"):
        if path.name == Path(__file__).name:  # its slips are meant
            continue
        text = path.read_text()
        found |= set(re.findall(r"[\"']([A-Z][A-Z0-9_]{2,})[\"']\s*:", text))
        found |= set(re.findall(r"[(,]\s*([A-Z][A-Z0-9_]{2,})=", text))
    return found


def test_platform_and_project_variables_are_never_taken_for_a_slip() -> None:
    named = PLATFORM + sorted(project_variables())
    assert {"SHOP_DATABASE_URL", "SHOP_PG_PORT", "DEV_OPS_TOKEN", "FAULTPOINT"} <= set(named)
    assert {name: meant(name, KNOWN) for name in named if meant(name, KNOWN)} == {}


@pytest.mark.parametrize(
    "name",
    [
        "STRIPE_WEBHOOK_SECRET_OLD",  # kept beside the new one during a rotation
        "STRIPE_WEBHOOK_SECRET_2",
        "OLD_STRIPE_WEBHOOK_SECRET",
        "FULFILMENT_ACTION_1",
        "MY_FULFILMENT_ACTION",
        "REDIS_SENTINEL_PASSWORD_FILE",  # Docker's _FILE convention for secrets
        "host",
        "port",
    ],
)
def test_a_name_beside_a_settings_but_no_slip_of_it_is_left_alone(name: str) -> None:
    """More than one letter apart: another variable, however alike its name."""
    assert meant(name, KNOWN) is None


def test_the_other_processes_settings_are_known_here() -> None:
    assert {f.name for cls in (Server, Local) for f in fields(cls)} == ELSEWHERE


def test_a_slip_stops_start_up_with_one_line_and_never_its_value() -> None:
    env = {
        "FULFILMENT_ACTION": "postgresql://shop:pw-SECRET-1@127.0.0.1:5433/shop",
        "FULFILLMENT_SQL": "@examples/shop/grant.sql",
        "REVERSAL_SQl": "@examples/shop/revoke.sql",
        "STRIPE_WEBHOOK_SECRETS": "whsec_SECRET2",
    }
    with pytest.raises(SettingsError) as refused:
        load(env)
    assert refused.value.problems == [
        "unknown setting FULFILLMENT_SQL: did you mean FULFILMENT_SQL?",
        "unknown setting REVERSAL_SQl: did you mean REVERSAL_SQL?",
        "unknown setting STRIPE_WEBHOOK_SECRETS: did you mean STRIPE_WEBHOOK_SECRET?",
    ]
    assert "SECRET" not in str(refused.value).replace("WEBHOOK_SECRET", "")


def test_a_slip_comes_first_beside_other_problems() -> None:
    with pytest.raises(SettingsError) as refused:
        load({"MAX_ATTEMPTS": "0", "MAX_ATTEMPT": "3"})
    assert refused.value.problems[0] == "unknown setting MAX_ATTEMPT: did you mean MAX_ATTEMPTS?"
    assert refused.value.problems[1].startswith("invalid setting MAX_ATTEMPTS=0")
