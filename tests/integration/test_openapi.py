"""webhook/openapi.yaml is the ops API: its schemas are exactly the typed views the code
answers (webhook.ops.RESPONSES), and a property-based API tester driven by the spec (Schemathesis)
calls every operation with the token against a ledger that holds one of everything (paid,
fulfilled, failed and interrupted payments, duplicates, a rejection, a reconcile run): every
answer has a documented status, conforms to its schema, and none is a 5xx; and every
documented status of every operation is answered in a case made for it."""

from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import pytest
import schemathesis
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode

import webhook
from tests.support.constants import BASIC, BEARER, OPS_TOKEN
from tests.support.inprocess import Seeded, app_without_redis
from tests.support.purchases import checkout_purchase
from tests.support.stripe_api import API_KEY, EventsApi
from webhook.http import csrf_token
from webhook.ops import RESPONSES

SPEC = Path(webhook.__file__).parent / "openapi.yaml"
CSRF = {"X-CSRF-Token": csrf_token(OPS_TOKEN)}
EXAMPLES = 30
"""Generated requests per operation and mode (valid, invalid): about a minute in all."""
UNDOCUMENTED = {"description", "title", "default", "format", "examples"}


def normalized(schema: Any) -> Any:
    """A JSON schema without its prose and with one spelling of "T or null", so the spec's
    hand-written schemas and the ones generated from the code compare by structure."""
    if isinstance(schema, list):
        return [normalized(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    s = {k: normalized(v) for k, v in schema.items() if k not in UNDOCUMENTED}
    branches = s.get("anyOf", [])
    if len(branches) == 2 and {"type": "null"} in branches:
        other = next(b for b in branches if b != {"type": "null"})
        if "type" in other and "$ref" not in other:
            s = {**{k: v for k, v in s.items() if k != "anyOf"}, **other}
            s["type"] = [other["type"], "null"]
    for key in ("enum", "required"):
        if key in s:
            s[key] = sorted(s[key])
    return s


def test_the_documented_schemas_are_exactly_the_code_s() -> None:
    spec = yaml.safe_load(SPEC.read_text())
    _, generated = msgspec.json.schema_components(
        RESPONSES, ref_template="#/components/schemas/{name}"
    )
    documented = spec["components"]["schemas"]
    assert sorted(documented) == sorted(generated)
    for name, schema in generated.items():
        assert normalized(documented[name]) == normalized(schema), name


@pytest.fixture
def config(config: dict[str, object], stripe_api: EventsApi) -> dict[str, object]:
    """The suite's, reading Checkout Sessions from the stand-in of Stripe's API."""
    return {**config, "STRIPE_API_KEY": API_KEY, "STRIPE_API_BASE": stripe_api.url}


class Sessions(msgspec.Struct):
    paid: str
    """Recorded by a POST already: its payment is queued."""
    unpaid: str


@pytest.fixture
def sessions(client: Any, stripe_api: EventsApi, rng: Any) -> Sessions:
    ids = []
    for status in ("paid", "unpaid"):
        session = checkout_purchase(rng)[3]["data"]["object"]
        session["payment_status"] = status
        stripe_api.add_session(session, [])
        ids.append(session["id"])
    fulfil = f"/ops/api/checkout-sessions/{ids[0]}/fulfil"
    assert client.post(fulfil, headers=BEARER).status_code == 200
    return Sessions(*ids)


@pytest.fixture
def api_schema(app, one_of_everything: Seeded, sessions: Sessions) -> Any:
    return schemathesis.openapi.from_wsgi("/ops/api/openapi.yaml", app, headers=BEARER)


def operations() -> list[tuple[str, str]]:
    spec = yaml.safe_load(SPEC.read_text())
    return [(m.upper(), path) for path, methods in spec["paths"].items() for m in methods]


def known_ids(ids: Seeded, path: str, sessions: Sessions) -> dict[str, Any]:
    """Path parameters that name records of the seeded ledger, when the path has one."""
    if "{session_id}" in path:
        return {"session_id": sessions.paid}
    if "{event_id}" in path:
        return {"event_id": ids.event}
    if "{payment_key}" in path:
        return {"payment_key": ids.fulfilled}
    return {}


@pytest.mark.parametrize("mode", list(GenerationMode), ids=str)
@pytest.mark.parametrize(("method", "path"), operations(), ids=[" ".join(o) for o in operations()])
def test_every_operation_answers_as_documented(
    api_schema: Any,
    one_of_everything: Seeded,
    sessions: Sessions,
    method: str,
    path: str,
    mode: GenerationMode,
) -> None:
    """Generated requests (valid ones, and invalid ones), with the token; for routes with an
    id, also for a record that exists (and for decisions, with the CSRF token, on a
    fulfilled payment, which refuses them): a documented status and content type, a body
    that conforms to its schema, never a 5xx; invalid ones refused (Schemathesis's checks)."""
    operation = api_schema[path][method]
    strategy = operation.as_strategy(generation_mode=mode)
    known = known_ids(one_of_everything, path, sessions)
    if known:
        headers = CSRF if method == "POST" else None
        strategy = st.one_of(
            strategy, operation.as_strategy(mode, path_parameters=known, headers=headers)
        )
    seen: Counter[int] = Counter()

    @given(case=strategy)
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def answers_as_documented(case: Any) -> None:
        seen[case.call_and_validate(headers=BEARER).status_code] += 1

    answers_as_documented()
    print(f"{method} {path} ({mode}): statuses {dict(sorted(seen.items()))}")
    assert seen and not any(status >= 500 for status in seen)


def recipes(ids: Seeded, sessions: Sessions) -> dict[tuple[str, str], dict[int, dict[str, Any]]]:
    """A request for every documented status of every operation: Case arguments, plus
    ``auth`` False for the one without the token (``basic`` for basic auth, which alone
    needs the CSRF token) and ``down`` for the app whose Redis is not there (the 503s)."""
    no_token: dict[str, Any] = {"auth": False}
    with_csrf = {"headers": CSRF}
    down: dict[str, Any] = {"down": True}
    basic: dict[str, Any] = {"auth": "basic"}
    forged = {**basic, "headers": {"X-CSRF-Token": "forged"}}
    pk = lambda key: {"path_parameters": {"payment_key": key}}  # noqa: E731
    cs = lambda key: {"path_parameters": {"session_id": key}}  # noqa: E731
    return {
        ("GET", "/checkout-sessions/{session_id}/fulfil"): {
            200: cs(sessions.paid),
            401: {**cs(sessions.paid), "auth": False},
            404: cs(sessions.unpaid),
            503: {**cs(sessions.paid), **down},
        },
        ("POST", "/checkout-sessions/{session_id}/fulfil"): {
            200: cs(sessions.paid),
            401: {**cs(sessions.paid), "auth": False},
            403: {**cs(sessions.paid), **basic},
            404: cs("cs_test_not_at_stripe"),
            409: cs(sessions.unpaid),
            503: {**cs(sessions.paid), **down},
        },
        ("GET", "/summary"): {200: {}, 401: no_token, 503: down},
        ("GET", "/events"): {
            200: {"query": {"since": "2000-01-01T00:00:00Z", "limit": 5}},
            400: {"query": {"limit": 0}},
            401: no_token,
            503: down,
        },
        ("GET", "/events/{event_id}"): {
            200: {"path_parameters": {"event_id": ids.event}, "query": {"payload": "1"}},
            400: {"path_parameters": {"event_id": ids.event}, "query": {"payload": "yes"}},
            401: {"path_parameters": {"event_id": ids.event}, "auth": False},
            404: {"path_parameters": {"event_id": "evt_missing"}},
            503: {"path_parameters": {"event_id": ids.event}, **down},
        },
        ("GET", "/payments"): {
            200: {"query": {"state": "attention"}},
            400: {"query": {"state": "bogus"}},
            401: no_token,
            503: down,
        },
        ("GET", "/payments/{payment_key}"): {
            200: pk(ids.fulfilled),
            401: {**pk(ids.fulfilled), "auth": False},
            404: pk("pi_missing"),
            503: {**pk(ids.fulfilled), **down},
        },
        ("POST", "/payments/{payment_key}/retry"): {
            200: {**pk(ids.failed), **with_csrf},
            401: {**pk(ids.failed), **with_csrf, "auth": False},
            403: {**pk(ids.failed), **forged},
            404: {**pk("pi_missing"), **with_csrf},
            409: {**pk(ids.fulfilled), **with_csrf},
            503: {**pk(ids.failed), **with_csrf, **down},
        },
        ("POST", "/payments/{payment_key}/resolve"): {
            200: {**pk(ids.interrupted), **with_csrf, "query": {"as": "fulfilled"}},
            400: {**pk(ids.interrupted), **with_csrf, "query": {"as": "maybe"}},
            401: {**pk(ids.interrupted), **with_csrf, "query": {"as": "retry"}, "auth": False},
            403: {**pk(ids.interrupted), **basic, "query": {"as": "retry"}},
            404: {**pk("pi_missing"), **with_csrf, "query": {"as": "retry"}},
            409: {**pk(ids.fulfilled), **with_csrf, "query": {"as": "retry"}},
            503: {**pk(ids.interrupted), **with_csrf, "query": {"as": "retry"}, **down},
        },
        ("GET", "/rejections"): {
            200: {},
            400: {"query": {"limit": 1001}},
            401: no_token,
            503: down,
        },
        ("GET", "/series"): {200: {}, 400: {"query": {"minutes": 0}}, 401: no_token, 503: down},
        ("GET", "/secrets"): {200: {}, 401: no_token, 503: down},
        ("GET", "/reconcile"): {
            200: {},
            400: {"query": {"limit": "ten"}},
            401: no_token,
            503: down,
        },
        ("GET", "/openapi.yaml"): {200: {}, 401: no_token},
        ("GET", "/fulfilment"): {200: {}, 401: no_token, 503: down},
        ("POST", "/bulk/retry"): {
            200: {**with_csrf, "query": {"state": "failed", "since": "1h", "dry_run": "1"}},
            400: {**with_csrf, "query": {"since": "yesterday"}},
            401: {**with_csrf, "auth": False},
            403: forged,
            503: {**with_csrf, **down},
        },
        ("POST", "/bulk/resolve"): {
            200: {**with_csrf, "query": {"state": "interrupted", "dry_run": "1"}},
            400: {**with_csrf, "query": {"state": "failed"}},
            401: {**with_csrf, "auth": False},
            403: forged,
            503: {**with_csrf, **down},
        },
        ("POST", "/fulfilment/pause"): {
            200: {**with_csrf, "query": {"reason": "ERP deploy"}},
            401: {**with_csrf, "auth": False},
            403: forged,
            503: {**with_csrf, **down},
        },
        ("POST", "/fulfilment/resume"): {
            200: with_csrf,
            401: {**with_csrf, "auth": False},
            403: forged,
            503: {**with_csrf, **down},
        },
    }


@pytest.fixture
def down_schema() -> Any:
    """The API of an app whose REDIS_URL points where nothing listens."""
    return schemathesis.openapi.from_wsgi(
        "/ops/api/openapi.yaml", app_without_redis(), headers=BEARER
    )


def test_every_documented_status_of_every_operation(
    api_schema: Any, down_schema: Any, one_of_everything: Seeded, sessions: Sessions
) -> None:
    spec = yaml.safe_load(SPEC.read_text())
    documented = {
        (method.upper(), path): {int(status) for status in op["responses"]}
        for path, methods in spec["paths"].items()
        for method, op in methods.items()
    }
    planned = recipes(one_of_everything, sessions)
    assert {op: set(by_status) for op, by_status in planned.items()} == documented
    for (method, path), by_status in planned.items():
        for status, recipe in by_status.items():
            arguments = dict(recipe)
            auth = arguments.pop("auth", True)
            down = arguments.pop("down", False)
            case = (down_schema if down else api_schema)[path][method].Case(**arguments)
            # a documented 503 is the point there, not a server error
            excluded = [not_a_server_error] if down else []
            headers = BASIC if auth == "basic" else BEARER if auth else {}
            response = case.call_and_validate(headers=headers, excluded_checks=excluded)
            assert response.status_code == status, (method, path, status, response.text)
