"""The Flask app: the Stripe-facing receiver and the people-facing ops views.

Reading order for one request: endpoint.py (POST, served ahead of Flask) -> intake.py
(checks) -> verify.py (signature) -> ledger/events.py (payment key) -> ledger/deliveries.py
+ the Lua script (the one Redis round trip, which also enqueues the RQ job) ->
workers/jobs.py. Imports the core (``ledger``), never ``workers``.
"""

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flask import Flask


def configure_logging() -> None:
    """One JSON line per delivery on stderr (the messages are JSON already)."""
    logger = logging.getLogger("webhook")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def create_app(test_config: Mapping[str, Any] | None = None) -> "Flask":
    """App factory: defaults, then the environment, then ``test_config``."""
    # Imported here, not at the top: gunicorn's master imports webhook.server (the worker
    # class) before forking, and its gevent workers must patch the standard library before
    # Flask, redis-py or RQ are imported.
    from flask import Flask

    from ledger import settings as settings_module
    from webhook import (
        dashboard,
        endpoint,
        landing,
        metrics,
        ops,
        receiver,
        serving,
        store,
        unavailable,
    )

    app = Flask(__name__)
    # /webhooks//stripe is no route (404, counted), not Werkzeug's 308 HTML redirect to
    # /webhooks/stripe, which Stripe does not follow. Before any route is added: a rule
    # takes the map's setting when it is added.
    app.url_map.merge_slashes = False
    # Raises SettingsError, one line per problem (gunicorn.conf.py checked them already).
    settings = settings_module.load(require=serving.REQUIRED, **dict(test_config or {}))
    store.init_app(app, settings)
    configure_logging()

    app.register_blueprint(receiver.bp)
    app.register_blueprint(ops.health_bp)
    app.register_blueprint(ops.api_bp)
    app.register_blueprint(landing.bp)
    app.register_blueprint(dashboard.bp)
    app.register_blueprint(metrics.bp)
    unavailable.init_app(app)
    app.wsgi_app = endpoint.StripeEndpoint(app)  # type: ignore[method-assign]
    return app
