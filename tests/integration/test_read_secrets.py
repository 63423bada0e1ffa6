"""Secrets by label: fingerprints, the retire rule, and the label in every ops surface."""

import hashlib
import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ledger import keys
from ledger import settings as settings_module
from ledger.read import secrets
from ledger.settings import fingerprint
from ledgerctl.cli import NO_SECRETS_HERE
from tests.support.constants import BASIC, BEARER, OLD_SECRET, SECRET
from tests.support.helpers import paid_event, run_cli, signed_headers
from webhook import create_app

DAY_MS = 86_400_000
NOW = 1_900_000_000_000


def test_unlabelled_secrets_get_a_fingerprint_never_the_secret() -> None:
    s = settings_module.load(
        {}, STRIPE_WEBHOOK_SECRET=f"{SECRET},{OLD_SECRET}", STRIPE_WEBHOOK_SECRET_LABELS="cli"
    )
    assert s.secret_labels == ["cli", fingerprint(OLD_SECRET)]
    assert (
        fingerprint(OLD_SECRET) == "sha256:" + hashlib.sha256(OLD_SECRET.encode()).hexdigest()[:8]
    )
    assert OLD_SECRET not in fingerprint(OLD_SECRET)


@pytest.mark.parametrize(
    ("secrets", "labels", "message"),
    [
        ("whsec_a,whsec_b", "cli,cli", "share the label cli"),
        ("whsec_a,whsec_a", "", "the same secret given twice"),
        ("whsec_a,whsec_b", "0,1", "plain number"),
    ],
)
def test_labels_must_be_unique_and_not_positions(secrets: str, labels: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        settings_module.load({}, STRIPE_WEBHOOK_SECRET=secrets, STRIPE_WEBHOOK_SECRET_LABELS=labels)


def statuses(last_seen: dict[str, int], counts: dict[str, int] | None = None) -> dict[str, str]:
    rows = secrets.rows(["new", "old"], counts or {}, last_seen, NOW, 7)
    return {r.label: r.status for r in rows}


def test_retire_only_a_secret_whose_traffic_moved_to_another() -> None:
    assert statuses({"new": NOW - 1000, "old": NOW - 8 * DAY_MS}) == {
        "new": "in_use",
        "old": "safe_to_retire",
    }
    assert statuses({"new": NOW - 1000, "old": NOW - 6 * DAY_MS})["old"] == "in_use"
    # nothing verified for 8 days: the secret used last stays (a quiet endpoint proves nothing)
    assert statuses({"new": NOW - 9 * DAY_MS, "old": NOW - 8 * DAY_MS}) == {
        "new": "safe_to_retire",
        "old": "idle",
    }
    assert statuses({"new": NOW - 1000}) == {"new": "in_use", "old": "never_seen"}


def test_labels_only_the_ledger_knows_are_listed_after_the_configured_ones() -> None:
    rows = secrets.rows(["new"], {"new": 3, "gone": 1}, {"gone": NOW}, NOW, 7)
    assert [(r.label, r.configured, r.status) for r in rows] == [
        ("new", True, "never_seen"),
        ("gone", False, "not_configured"),
    ]


def test_every_surface_shows_labels_and_the_retire_flag(config, redis, rng) -> None:
    client = create_app({**config, "STRIPE_WEBHOOK_SECRET_LABELS": "primary"}).test_client()
    old = fingerprint(OLD_SECRET)
    event, body = paid_event(rng)
    for secret in (OLD_SECRET, SECRET, SECRET):
        headers = signed_headers(body, secret=secret)
        assert client.post("/webhooks/stripe", data=body, headers=headers).status_code == 200
    seconds, _ = redis.time()
    redis.hset(keys.SECRETS_LAST_SEEN, old, (seconds - 8 * 86400) * 1000)  # 8 days ago
    redis.hset(keys.STATS, "secret:retired", 4)  # a label no longer configured

    api = client.get("/ops/api/secrets", headers=BEARER).get_json()
    assert api["retire_after_days"] == 7
    assert [(r["label"], r["deliveries"], r["status"]) for r in api["secrets"]] == [
        ("primary", 2, "in_use"),
        (old, 1, "safe_to_retire"),
        ("retired", 4, "not_configured"),
    ]
    summary = client.get("/ops/api/summary", headers=BEARER).get_json()
    assert summary["deliveries_by_secret"] == {"primary": 2, old: 1, "retired": 4}
    assert client.get(f"/ops/api/events/{event['id']}", headers=BEARER).get_json()[
        "secret_label"
    ] == ("primary")

    families = {
        f.name: f
        for f in text_string_to_metric_families(client.get("/metrics", headers=BEARER).text)
    }
    by_label = {
        name: {s.labels["secret"]: s.value for s in families[name].samples}
        for name in ("webhook_secret_deliveries", "webhook_secret_safe_to_retire")
    }
    assert by_label["webhook_secret_deliveries"] == {"primary": 2, old: 1, "retired": 4}
    assert by_label["webhook_secret_safe_to_retire"] == {"primary": 0, old: 1}
    seen = families["webhook_secret_last_seen_timestamp_seconds"].samples
    assert {s.labels["secret"] for s in seen} == {"primary", old}

    page = client.get("/ops/", headers=BASIC).get_data(as_text=True)
    assert "safe to retire" in page and old in page and "<td>retired</td>" in page
    event_page = client.get(f"/ops/events/{event['id']}", headers=BASIC).get_data(as_text=True)
    assert '<td id="event-secret">primary</td>' in event_page


def test_the_cli_says_when_its_terminal_has_no_secrets_configured(config, redis, rng) -> None:
    """A new terminal beside scripts/run.sh has no STRIPE_WEBHOOK_SECRET: every label then
    reads 'not configured' there, and the command says why instead of leaving it to a guess."""
    client = create_app({**config, "STRIPE_WEBHOOK_SECRET_LABELS": "local"}).test_client()
    _, body = paid_event(rng)
    assert (
        client.post("/webhooks/stripe", data=body, headers=signed_headers(body)).status_code == 200
    )
    bare = {name: value for name, value in config.items() if name != "STRIPE_WEBHOOK_SECRET"}
    here = run_cli(bare, "secrets")
    assert here.exit_code == 0 and "not configured" in here.stdout
    assert NO_SECRETS_HERE in here.stderr
    as_json = run_cli(bare, "secrets", "--json")
    assert json.loads(as_json.stdout)["secrets"][0]["status"] == "not_configured"
    configured = run_cli(config, "secrets")
    assert configured.exit_code == 0 and NO_SECRETS_HERE not in configured.stderr
