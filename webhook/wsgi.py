"""WSGI entry point for gunicorn: ``gunicorn -c gunicorn.conf.py webhook.wsgi:app``."""

from webhook import create_app

app = create_app()
