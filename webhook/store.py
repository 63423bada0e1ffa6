"""The app's settings, Redis connection and ledger, owned per process (Flask's get_db pattern)."""

from flask import Flask, current_app
from redis import Redis

from ledger.attempts import Attempts
from ledger.connection import connect
from ledger.deliveries import Ledger
from ledger.settings import Settings

EXTENSION = "webhook_ledger"


def current_settings() -> Settings:
    """The settings ``create_app`` loaded: the one way the web app reads them."""
    return current_app.extensions["settings"]


def get_ledger() -> Ledger:
    """The ledger of the current app, created on first use in each process."""
    return ledger_of(current_app)


def ledger_of(app: Flask) -> Ledger:
    """The ledger of ``app``, created on first use in each process (also outside a request:
    webhook/endpoint.py serves the Stripe endpoint without Flask's contexts)."""
    ledger = app.extensions.get(EXTENSION)
    if ledger is None:
        settings = app.extensions["settings"]
        ledger = Ledger(connect(settings), settings)
        app.extensions[EXTENSION] = ledger
    return ledger


def get_redis() -> Redis:
    return get_ledger().redis


def current_attempts() -> Attempts:
    """The fulfilment state machine on the app's Redis, for a person's decision."""
    return Attempts(get_redis(), current_settings())


def init_app(app: Flask, app_settings: Settings) -> None:
    """Keep the settings; nothing connects yet: gunicorn may fork after app creation."""
    app.extensions["settings"] = app_settings
    app.extensions.pop(EXTENSION, None)
