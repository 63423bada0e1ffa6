"""scripts/run.sh's banner tells the tools in another terminal where this run is when it is
not at the default places (a moved Redis port, a moved web port, Sentinel), and run.sh
writes it all, secrets included, to var/run.env (0600) for that terminal to source."""

import os
import stat
import subprocess
from pathlib import Path

from ledger.settings import load
from ledgerctl.banner import banner, tools_env
from ledgerctl.run_local import write_tools_env

SECRET = "whsec_localSECRET123"


def shown(env: dict[str, str]) -> str:
    settings = load({**env, "STRIPE_WEBHOOK_SECRET": SECRET})
    return banner(env, settings, SECRET, dev_token="tok")


def test_nothing_to_export_at_the_default_places() -> None:
    assert "another terminal" not in shown({})


def test_moved_ports_are_given_to_export() -> None:
    text = shown({"REDIS_URL": "redis://127.0.0.1:6420/0", "WEB_PORT": "8200"})
    wanted = "another terminal: . var/run.env   (REDIS_URL=redis://127.0.0.1:6420/0 WEB_PORT=8200)"
    assert wanted in text


def test_a_replicated_run_gives_its_sentinels() -> None:
    text = shown({"REDIS_SENTINELS": "127.0.0.1:26390,127.0.0.1:26391"})
    assert ". var/run.env   (REDIS_SENTINELS=127.0.0.1:26390,127.0.0.1:26391)\n" in text


def test_a_downstream_other_than_the_default_file_is_given_to_export(tmp_path) -> None:
    """scripts/run.sh --ha keeps its downstream in var/ha: the replay's read-back must be
    told; the default file (also written absolute, as run.sh does) needs nothing."""
    ha = f"sqlite:///{tmp_path}/var/ha/downstream.sqlite3"
    assert f". var/run.env   (FULFILMENT_ACTION={ha})\n" in shown({"FULFILMENT_ACTION": ha})
    default = f"sqlite:///{Path('var/downstream.sqlite3').resolve()}"
    assert "another terminal" not in shown({"FULFILMENT_ACTION": default})


def test_settings_the_tools_read_to_say_what_they_show_are_given_to_export() -> None:
    """Without them, webhook-ledger in another terminal judged "stuck" and the breaker's
    cool-down by its own defaults, not by this run's (ops review)."""
    text = shown({"STUCK_QUEUED_SECONDS": "30", "BREAKER_COOLDOWN_SECONDS": "10"})
    assert "(BREAKER_COOLDOWN_SECONDS=10 STUCK_QUEUED_SECONDS=30)\n" in text
    assert "another terminal" not in shown({"STUCK_QUEUED_SECONDS": "300"})  # its default


def test_a_reversal_setting_is_given_and_a_secret_one_masked() -> None:
    """A person's resolve in another terminal reverses by REVERSAL_*: without them there,
    a payment refunded in full and resolved as fulfilled was never reversed (review)."""
    text = shown({"REVERSAL_ACTION": "sqlite:///tmp/r.sqlite3", "REVERSAL_PER_REFUND": "true"})
    assert "REVERSAL_PER_REFUND=true" in text and "REVERSAL_ACTION=sqlite:///tmp/r.sqlite3" in text
    secret = "postgresql://shop:pw-SECRET-9@127.0.0.1:5433/shop"
    text = shown({"REVERSAL_ACTION": secret, "REVERSAL_SQL": "UPDATE x SET y = 1"})
    assert "pw-SECRET-9" not in text
    action = "REVERSAL_ACTION=postgresql://***@127.0.0.1:5433/shop"
    wanted = f"({action} REVERSAL_SQL='UPDATE x SET y = 1')"
    assert f". var/run.env   {wanted}\n" in text


def test_a_capability_url_reversal_is_shown_by_its_origin() -> None:
    """Its secret is its path, which redact() never touches: the banner printed it whole."""
    capability = "https://hooks.example.com/services/T0/B0/XXXXcapability"
    text = shown({"REVERSAL_ACTION": capability})
    assert "XXXXcapability" not in text and "services/T0" not in text
    assert ". var/run.env   (REVERSAL_ACTION=https://hooks.example.com:443/***)\n" in text


def test_another_terminal_sources_what_the_banner_names_secrets_included(tmp_path) -> None:
    """examples/shop/run.sh's REVERSAL_ACTION holds the shop's password: the banner could
    only name it, and a replay in another terminal, without it, found payments correctly
    revoked 'not taken back' (review). The file gives it whole, to this user only."""
    shop = "postgresql://shop:pw-SECRET-9@127.0.0.1:5433/shop"
    env = {
        "FULFILMENT_ACTION": shop,
        "FULFILMENT_SQL": "@examples/shop/grant.sql",
        "REVERSAL_ACTION": shop,
        "REVERSAL_SQL": "@examples/shop/revoke.sql",
        "REDIS_URL": "redis://:it's-SECRET@127.0.0.1:6420/0",
        "WEB_PORT": "8200",
    }
    values = tools_env(env, load({**env, "STRIPE_WEBHOOK_SECRET": SECRET}))
    assert values == {
        "REDIS_URL": env["REDIS_URL"],
        "WEB_PORT": "8200",
        "FULFILMENT_ACTION": shop,
        "REVERSAL_ACTION": shop,
        "FULFILMENT_SQL": env["FULFILMENT_SQL"],
        "REVERSAL_SQL": env["REVERSAL_SQL"],
    }
    path = tmp_path / "var" / "run.env"
    path.parent.mkdir()
    path.write_text("export REVERSAL_PER_REFUND=true\n")  # an earlier run's, world-readable
    path.chmod(0o644)
    write_tools_env(path, values)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    names = " ".join(f'"${name}"' for name in [*values, "REVERSAL_PER_REFUND"])
    done = subprocess.run(
        ["bash", "-c", f'. "$0"; printf "%s\\n" {names}', str(path)],
        env={"PATH": os.environ["PATH"]}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert done.stdout.splitlines() == [*values.values(), ""]


def test_a_redis_password_is_masked_whatever_it_holds() -> None:
    text = shown({"REDIS_URL": 'redis://:hun"ter2@127.0.0.1:6420/0'})
    assert "redis         redis://***@127.0.0.1:6420/0 (data in var/redis" in text
    assert "(REDIS_URL=redis://***@127.0.0.1:6420/0)" in text
    assert "ter2" not in text and "hun" not in text


def test_a_database_downstream_says_its_effect_or_that_only_the_key_is_recorded() -> None:
    """With neither FULFILMENT_SQL nor FULFILMENT_EFFECT a payment goes fulfilled with
    receipt {} and only its key in webhook_ledger_effects: legitimate, but said (review)."""
    shop = "postgresql://shop:pw-SECRET-9@127.0.0.1:5433/shop"
    revoke = "@examples/shop/revoke.sql"
    text = shown({"FULFILMENT_ACTION": shop, "REVERSAL_ACTION": shop, "REVERSAL_SQL": revoke})
    assert (
        "  downstream    postgresql://***@127.0.0.1:5433/shop\n                effect: none — only"
        " the key is recorded (FULFILMENT_SQL or FULFILMENT_EFFECT adds yours)\n"
        "  reversal      postgresql://***@127.0.0.1:5433/shop\n"
        "                effect: REVERSAL_SQL=@examples/shop/revoke.sql\n"
    ) in text
    assert "pw-SECRET-9" not in text
    text = shown({"FULFILMENT_ACTION": "https://shop.example/fulfil"})
    assert "effect:" not in text and "  reversal" not in text  # its own code is the effect


def test_another_terminal_reaches_the_primary_through_the_runs_sentinels() -> None:
    """Its master's name, database, TLS and both passwords as this run has them, not only
    where the Sentinels are."""
    env = {
        "REDIS_SENTINELS": "127.0.0.1:26390",
        "REDIS_SENTINEL_MASTER": "shop-ledger",
        "REDIS_SENTINEL_DB": "3",
        "REDIS_SENTINEL_TLS": "true",
        "REDIS_SENTINEL_PASSWORD": "sentinel-pw-1",
        "REDIS_PASSWORD": "data-pw-1",
    }
    given = tools_env(env, load({**env, "STRIPE_WEBHOOK_SECRET": SECRET}))
    assert {k: v for k, v in given.items() if k.startswith("REDIS_")} == env
    plain = {"REDIS_SENTINELS": "127.0.0.1:26390"}
    given = tools_env(plain, load({**plain, "STRIPE_WEBHOOK_SECRET": SECRET}))
    assert {k: v for k, v in given.items() if k.startswith("REDIS_")} == plain


def test_every_setting_the_run_changed_reaches_the_tools_but_its_own_secrets() -> None:
    """From a terminal that sourced var/run.env, ``webhook-ledger fulfil-session`` recorded
    a test-mode session under the default STRIPE_MODE=live and held the paid order, and
    prove-action ran without the run's FULFILMENT_EFFECT (merchant review): the tools get
    every setting the run changed. Its webhook secrets and tokens no tool needs, and a
    run.sh started from that terminal would take them as its own, so they are left out."""
    env = {
        "STRIPE_MODE": "test",
        "FULFILMENT_EFFECT": "shop.orders:grant",
        "FULFILMENT_REPLAY_SAFE": "true",
        "CHECKOUT_WAIT_SECONDS": "10",
        "STRIPE_API_KEY": "rk_test_KEY-SECRET-1",
        "OPS_TOKEN": "tok-SECRET-2",
        "STRIPE_WEBHOOK_SECRET_LABELS": "local",
    }
    settings = load({**env, "STRIPE_WEBHOOK_SECRET": SECRET})
    assert tools_env(env, settings) == {
        "FULFILMENT_EFFECT": "shop.orders:grant",
        "FULFILMENT_REPLAY_SAFE": "true",
        "STRIPE_MODE": "test",
        "STRIPE_API_KEY": "rk_test_KEY-SECRET-1",
        "CHECKOUT_WAIT_SECONDS": "10",
    }
    text = banner(env, settings, SECRET, dev_token="tok")
    assert "STRIPE_API_KEY='rk_test_***'" in text and "KEY-SECRET-1" not in text
    assert "SECRET-2" not in text and "OPS_TOKEN" not in text.split("another terminal")[1]


def test_the_local_ops_token_is_named_never_shown() -> None:
    """The banner is often kept (`scripts/run.sh | tee log`): it says where the local ops
    token is and how to print it, never the token itself."""
    token = "dev-TOKEN-SECRET-3"
    settings = load({"STRIPE_WEBHOOK_SECRET": SECRET, "OPS_TOKEN": token})
    text = banner({}, settings, SECRET, dev_token=token)
    assert "SECRET-3" not in text
    assert "ops token     DEV_OPS_TOKEN of var/dev.env" in text
