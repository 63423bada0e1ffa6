"""scripts/run.sh's banner tells the tools in another terminal where this run is when it is
not at the default places (a moved Redis port, a moved web port, Sentinel)."""

from pathlib import Path

from ledger.settings import load
from ledgerctl.banner import banner

SECRET = "whsec_localSECRET123"


def shown(env: dict[str, str]) -> str:
    settings = load({**env, "STRIPE_WEBHOOK_SECRET": SECRET})
    return banner(env, settings, SECRET, dev_token="tok")


def test_nothing_to_export_at_the_default_places() -> None:
    assert "another terminal" not in shown({})


def test_moved_ports_are_given_to_export() -> None:
    text = shown({"REDIS_URL": "redis://127.0.0.1:6420/0", "WEB_PORT": "8200"})
    wanted = "and in another terminal: export REDIS_URL=redis://127.0.0.1:6420/0 WEB_PORT=8200"
    assert wanted in text


def test_a_replicated_run_gives_its_sentinels() -> None:
    text = shown({"REDIS_SENTINELS": "127.0.0.1:26390,127.0.0.1:26391"})
    assert "export REDIS_SENTINELS=127.0.0.1:26390,127.0.0.1:26391\n" in text


def test_a_downstream_other_than_the_default_file_is_given_to_export(tmp_path) -> None:
    """scripts/run.sh --ha keeps its downstream in var/ha: the replay's read-back must be
    told; the default file (also written absolute, as run.sh does) needs nothing."""
    ha = f"sqlite:///{tmp_path}/var/ha/downstream.sqlite3"
    assert f"export FULFILMENT_ACTION={ha}\n" in shown({"FULFILMENT_ACTION": ha})
    default = f"sqlite:///{Path('var/downstream.sqlite3').resolve()}"
    assert "another terminal" not in shown({"FULFILMENT_ACTION": default})


def test_settings_the_tools_read_to_say_what_they_show_are_given_to_export() -> None:
    """Without them, webhook-ledger in another terminal judged "stuck" and the breaker's
    cool-down by its own defaults, not by this run's (ops review)."""
    text = shown({"STUCK_QUEUED_SECONDS": "30", "BREAKER_COOLDOWN_SECONDS": "10"})
    assert "export STUCK_QUEUED_SECONDS=30 BREAKER_COOLDOWN_SECONDS=10\n" in text
    assert "another terminal" not in shown({"STUCK_QUEUED_SECONDS": "300"})  # its default


def test_a_reversal_setting_is_given_and_a_secret_one_only_by_name() -> None:
    """A person's resolve in another terminal reverses by REVERSAL_*: without them there,
    a payment refunded in full and resolved as fulfilled was never reversed (review)."""
    text = shown({"REVERSAL_ACTION": "sqlite:///tmp/r.sqlite3", "REVERSAL_PER_REFUND": "true"})
    assert "REVERSAL_PER_REFUND=true" in text and "REVERSAL_ACTION=sqlite:///tmp/r.sqlite3" in text
    secret = "postgresql://shop:pw-SECRET-9@127.0.0.1:5433/shop"
    text = shown({"REVERSAL_ACTION": secret, "REVERSAL_SQL": "UPDATE x SET y = 1"})
    assert "pw-SECRET-9" not in text
    assert "and REVERSAL_ACTION as the service has it (not shown: it may hold a secret)" in text


def test_a_capability_url_reversal_is_given_only_by_name() -> None:
    """Its secret is its path, which redact() never touches: the banner printed it whole."""
    capability = "https://hooks.example.com/services/T0/B0/XXXXcapability"
    text = shown({"REVERSAL_ACTION": capability})
    assert "XXXXcapability" not in text and "services/T0" not in text
    assert "and REVERSAL_ACTION as the service has it (not shown: it may hold a secret)" in text


def test_a_redis_password_is_masked_whatever_it_holds() -> None:
    text = shown({"REDIS_URL": 'redis://:hun"ter2@127.0.0.1:6420/0'})
    assert "redis         redis://***@127.0.0.1:6420/0 (data in var/redis" in text
    assert "export REDIS_URL=redis://***@127.0.0.1:6420/0" in text
    assert "ter2" not in text and "hun" not in text
