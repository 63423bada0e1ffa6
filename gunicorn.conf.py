"""Gunicorn settings for the web process; every value can be overridden by environment."""

import os

bind = f"{os.environ.get('HOST', '127.0.0.1')}:{os.environ.get('PORT', '8000')}"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "gthread")
threads = int(os.environ.get("GUNICORN_THREADS", "4"))
keepalive = 5
# Stripe waits up to ~20 s; a request that takes longer than this is a bug.
timeout = 30
graceful_timeout = 10
accesslog = os.environ.get("GUNICORN_ACCESS_LOG") or None
errorlog = "-"
loglevel = os.environ.get("LOG_LEVEL", "info")
# Verified bodies are at most MAX_BODY_BYTES; headers stay within gunicorn's limits.
limit_request_field_size = 8190
