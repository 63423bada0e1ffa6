"""Secrets by label: fingerprints and the rules for labels."""

import hashlib

import pytest

from tests.conftest import OLD_SECRET, SECRET
from webhook import settings as settings_module
from webhook.settings import fingerprint


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
        ("whsec_a,whsec_b", "cli,cli", "share a label"),
        ("whsec_a,whsec_a", "", "share a label"),
        ("whsec_a,whsec_b", "0,1", "plain number"),
    ],
)
def test_labels_must_be_unique_and_not_positions(secrets: str, labels: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        settings_module.load({}, STRIPE_WEBHOOK_SECRET=secrets, STRIPE_WEBHOOK_SECRET_LABELS=labels)
