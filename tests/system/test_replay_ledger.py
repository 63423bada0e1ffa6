"""Which ledger scripts/replay_events.py reads, and what it says when it cannot: REDIS_URL,
else REDIS_PORT as scripts/run.sh starts its redis (it took WEB_PORT for the endpoint but not
REDIS_PORT, so beside `REDIS_PORT=... scripts/run.sh` it read 6389); a Redis it cannot reach
at the start ends the run before anything is sent, saying so (its --help said exit 3 came
"once everything was sent"). `webhook-ledger` finds it the same way (it read 6389 beside
such a stack, another stack's ledger or none)."""

import json
import subprocess
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import urlsplit

from tests.support.processes import BIN, free_port, service_env
from tests.support.replay import local_server, run_script


def test_redis_port_finds_the_ledger_for_replay_and_cli(stack, config, tmp_path: Path) -> None:
    s = stack()
    web = s.start_web()
    s.start_worker()
    port = urlsplit(str(config["REDIS_URL"])).port
    env = {k: v for k, v in s.env.items() if k != "REDIS_URL"}
    env |= {"REDIS_PORT": str(port), "WEB_PORT": str(web.port)}  # no --url: WEB_PORT's
    out = tmp_path / "report.json"
    proc = run_script(env, "--generate", "1", "--expect-once", "--json", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["layers"]["ledger"]["deliveries"] == 3, report["layers"]
    assert report["findings"]["passed"]
    summary = subprocess.run(
        [str(BIN / "webhook-ledger"), "summary", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert summary.returncode == 0, summary.stderr
    assert json.loads(summary.stdout)["deliveries"] == 3


def test_an_unreachable_redis_ends_the_run_before_anything_is_sent() -> None:
    posts: list[str] = []

    def endpoint(handler: BaseHTTPRequestHandler) -> None:
        posts.append(handler.path)
        handler.send_response(200)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    env = service_env(nowhere)
    with local_server(endpoint) as base:
        proc = run_script(env, "--url", f"{base}/webhooks/stripe", "--generate", "1")
    assert proc.returncode == 3, proc.stderr
    said = " ".join(proc.stderr.split())  # the terminal's width wraps it
    assert "Redis unreachable:" in said and f"(the ledger at {nowhere}); nothing was sent" in said
    assert posts == []
    told = " ".join(run_script(env, "--help").stdout.split())
    assert "3 Redis unreachable: at the start, before anything is sent" in told
    assert "else 127.0.0.1:REDIS_PORT (6389), as scripts/run.sh starts it" in told, told


def test_serve_sessions_that_names_no_stand_in_ends_the_run_before_anything_is_sent(
    redis_server,
) -> None:
    """--serve-sessions at Stripe's own API, or at a server that does not take sessions,
    was a traceback and exit 1 (and a PUT to api.stripe.com): now one line, exit 2, and no
    event is sent to the endpoint."""
    posts: list[str] = []

    def endpoint(handler: BaseHTTPRequestHandler) -> None:
        posts.append(handler.command + " " + handler.path)
        handler.send_response(404)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    env = service_env(redis_server.url)
    with local_server(endpoint) as base:
        url = ["--url", f"{base}/webhooks/stripe", "--generate", "1", "--checkout"]
        stripe = run_script(env, *url, "--serve-sessions", "https://api.stripe.com")
        other = run_script(env, *url, "--serve-sessions", base)
    assert stripe.returncode == 2, stripe.stderr
    assert "Stripe's own API takes no sessions" in " ".join(stripe.stderr.split())
    assert other.returncode == 2, other.stderr
    said = " ".join(other.stderr.split())
    assert "no stand-in of Stripe's API there" in said and "Traceback" not in said
    assert "PUT /standin/checkout/sessions/{id} answered 501" in said  # it takes POST alone
    assert posts == [], posts  # no event sent
