"""An exception webhook/endpoint.py does not expect is Flask's to answer, as in a view."""

import pytest

from ledger import keys
from tests.support.helpers import paid_event, signed_headers
from webhook.store import ledger_of


def test_an_unexpected_error_is_answered_by_flask_and_records_nothing(
    app, client, redis, rng, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(_delivery: object) -> None:
        raise RuntimeError("a bug in the ledger call")

    monkeypatch.setattr(ledger_of(app), "record_delivery", broken)
    app.config["PROPAGATE_EXCEPTIONS"] = False  # as served, not as the test client's default
    _, body = paid_event(rng)
    response = client.post("/webhooks/stripe", data=body, headers=signed_headers(body))
    assert response.status_code == 500
    assert any("a bug in the ledger call" in (r.exc_text or "") for r in caplog.records)
    assert not redis.keys(keys.EVENT_PREFIX + "*")  # nothing recorded
