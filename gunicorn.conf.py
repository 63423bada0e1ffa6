"""Gunicorn settings for the web process; every value can be overridden by environment.

Read in gunicorn's master before it forks: every setting of the service is checked here
(webhook/serving.py), so a wrong one stops the web process once, with one line per
problem, before any worker starts.
"""

import os

from ledger.ports import port_in_use
from ledger.setting_files import access_log_problems, or_exit_too
from webhook import serving

# GUNICORN_ACCESS_LOG a file gunicorn could not write is named in the same refusal.
_server = or_exit_too(access_log_problems(os.environ), serving.load_or_exit)
# WEB_PORT, else the platform's PORT (on every interface unless HOST is set), else 8000.
bind = _server.bind
workers = _server.WEB_CONCURRENCY
# gevent with whole bodies under BODY_READ_TIMEOUT and JSON for malformed HTTP (webhook/server.py):
# a slow client holds one greenlet, not one of a few threads.
worker_class = _server.GUNICORN_WORKER_CLASS
# Connections one process serves at once. The worker accepts 10 % more (at least 10) and,
# past this number, sheds its oldest idle or slow connection for each new one; only when
# every connection is being answered do new ones wait in the listen backlog
# (webhook/connections.py). Each holds at most MAX_BODY_BYTES of body while it is read.
worker_connections = _server.GUNICORN_WORKER_CONNECTIONS
threads = _server.GUNICORN_THREADS  # gthread only
# One listening socket per worker, the kernel spreading connections across them: with one
# shared socket, whichever worker woke first took a burst of new connections, up to all of
# them (docs/WEB.md, "One socket per worker").
reuse_port = _server.reuse_port
# gunicorn's own parser in Python, also where gunicorn_h1c (its C parser) is installed: the
# C one saved 3-6% of the server's CPU a request and no measurable peak or p99 on this
# service (docs/BENCHMARKS.md, "gunicorn's C HTTP parser"), and the hostile-HTTP tests run
# against this one.
http_parser = "python"
# Also the deadline for a request's line and headers (gunicorn's gevent worker).
keepalive = 5
# Stripe waits up to ~20 s; a request that takes longer than this is a bug.
timeout = 30
graceful_timeout = 10
accesslog = _server.GUNICORN_ACCESS_LOG or None
errorlog = "-"
loglevel = _server.LOG_LEVEL
# forwarded_allow_ips is gunicorn's default (127.0.0.1 and ::1, or FORWARDED_ALLOW_IPS): a
# SCRIPT_NAME header from such a peer is refused (400 script_name_refused,
# webhook/request_head.py), gunicorn drops it from any other; the app is served at the root.
# Verified bodies are at most MAX_BODY_BYTES; headers stay within gunicorn's limits.
limit_request_field_size = 8190
# Several servers may run on one machine (tests, benchmarks): no shared control socket.
control_socket_disable = True

# Prometheus multiprocess mode: each worker writes its samples to files in one directory,
# /metrics aggregates them, so request latency agrees whichever worker is scraped. Made as
# the master starts (on_starting), once the port is known to be free: a refused start
# leaves nothing in the temp dir.
_own_metrics_dir = not os.environ.get("PROMETHEUS_MULTIPROC_DIR")


def on_starting(server):
    # A port in use refuses the start at once, one line, like a wrong setting: gunicorn would
    # retry it for 5 s, and with reuse_port in each worker, forked again for ever. Only as
    # the master starts: not on a HUP reload, nor in a master that USR2 re-executed (the old
    # master's workers hold the port).
    if "GUNICORN_PID" not in os.environ:
        taken = [port_in_use(address) for address in server.cfg.bind]
        if any(taken):
            from ledger.setting_fields import exit_with

            exit_with(filter(None, taken))
    if server.cfg.reuse_port:
        # gunicorn's own "Listening at:  (pid)" names no address then: when_ready's does
        server.log.error_log.addFilter(_no_empty_listening_line)
    caveat = serving.reuse_port_caveat() if server.cfg.reuse_port else None
    if caveat:
        server.log.warning(caveat)
    if _own_metrics_dir and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        import tempfile

        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="webhook-prometheus-")


def _no_empty_listening_line(record):
    return not (record.msg == "Listening at: %s (%s)" and record.args and not record.args[0])


def when_ready(server):
    # With a socket per worker the master holds none, and gunicorn's own "Listening at:"
    # line names no address: say where the workers listen.
    if not server.LISTENERS:
        where = ", ".join(f"http://{address}" for address in server.cfg.bind)
        server.log.info("Listening at: %s (a socket in each worker)", where)


def post_fork(server, worker):
    where = ", ".join(str(listener) for listener in worker.sockets)
    server.log.info("Worker %s listening at: %s", worker.pid, where)


def on_exit(server):
    if _own_metrics_dir and os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        import shutil

        shutil.rmtree(os.environ["PROMETHEUS_MULTIPROC_DIR"], ignore_errors=True)


def child_exit(server, worker):
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)
