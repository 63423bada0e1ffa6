"""What scripts/replay_events.py must not trust: a server that redirects its signed bodies
elsewhere, trickles or never ends its answer; and a signing secret the endpoint refuses or
that is not one at all. Small local servers stand in for the hostile endpoint; the
service itself (real gunicorn) for the refused secret."""

import json
import threading
from http.server import BaseHTTPRequestHandler

import pytest

from ledger.settings import fingerprint
from tests.support.processes import wait_until
from tests.support.replay import AGAINST_A_STAND_IN, local_server, replay, run_script

OTHER_SECRET = "whsec_" + "0" * 32
"""A well-formed secret the service does not have."""


@pytest.fixture
def report_env(stack, tmp_path) -> dict[str, str]:
    """The environment of a run whose read-back finds a real, empty ledger."""
    return stack(TMP_REPORT=str(tmp_path / "report.json")).env


def test_a_redirect_is_not_followed_nor_acknowledged(report_env, redis) -> None:
    elsewhere: list[str] = []

    def collector(handler: BaseHTTPRequestHandler) -> None:
        elsewhere.append(handler.headers.get("Stripe-Signature", ""))
        handler.send_response(200)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    with local_server(collector) as other:

        def redirect(handler: BaseHTTPRequestHandler) -> None:
            handler.send_response(307)
            handler.send_header("Location", f"{other}/collect")
            handler.send_header("Content-Length", "0")
            handler.end_headers()

        with local_server(redirect) as base:
            _, report = replay(report_env, f"{base}/webhooks/stripe", *AGAINST_A_STAND_IN, expect=1)
    assert elsewhere == [], "no signed body went to the other server"
    assert report["layers"]["answered"] == {"307": 3}
    assert report["findings"]["unacknowledged"] == 3 and not report["findings"]["passed"]
    assert report["findings"]["lost"] == []  # nothing acknowledged, so nothing lost
    assert any(f"307 to {other}/collect" in note for note in report["notes"]), report["notes"]


def test_a_trickled_answer_is_cut_at_the_request_deadline(report_env, redis) -> None:
    """Status line and headers one byte at a time, for ever: a per-read timeout never fires;
    the request's deadline does."""
    stopped = threading.Event()

    def trickle(handler: BaseHTTPRequestHandler) -> None:
        answer = b"HTTP/1.1 200 OK\r\n" + b"X-Slow: " + b"a" * 100_000
        for byte in answer:
            if stopped.wait(0.05):
                return
            try:
                handler.wfile.write(bytes([byte]))
                handler.wfile.flush()
            except OSError:
                return  # the client hung up

    try:
        with local_server(trickle) as base:
            _, report = replay(
                report_env, f"{base}/webhooks/stripe", "--generate", "1", "--request-timeout", "1"
            )
    finally:
        stopped.set()
    assert report["layers"]["answered"] == {"0": 3}
    assert report["findings"]["unacknowledged"] == 3 and not report["findings"]["passed"]
    assert any("3 requests got no whole answer within 1 s" in n for n in report["notes"])


def test_an_endless_answer_is_read_only_up_to_the_bound(report_env, redis) -> None:
    """A 200 whose chunked body never ends: the status counts, the body is not read whole
    (the connection is dropped), and the run ends without waiting for the deadline."""
    sent = []

    def endless(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        chunk = b"%x\r\n%s\r\n" % (65536, b"x" * 65536)
        total = 0
        try:
            for _ in range(16384):  # 1 GiB at most, if nobody hung up
                handler.wfile.write(chunk)
                total += len(chunk)
        except OSError:
            pass  # the client hung up
        sent.append(total)

    with local_server(endless) as base:
        _, report = replay(
            report_env,
            f"{base}/webhooks/stripe",
            "--generate",
            "1",
            "--request-timeout",
            "60",
            "--no-wait",  # it acknowledged, but it is no ledger: nothing to wait for
        )
    assert report["layers"]["answered"] == {"200": 3}
    assert report["notes"] == []  # no request ran into its deadline
    wait_until(lambda: len(sent) == 3, 60, 0.05, "the server to see each client hang up")
    assert max(sent) < 16384 * 65536, "each answer was dropped unread"


def test_an_answer_nested_past_the_stack_is_no_reason(report_env, redis) -> None:
    """A 400 whose JSON nests deeper than Python's parser recurses: counted, not a crash."""
    nested = b"[" * 60000

    def deep(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(400)
        handler.send_header("Content-Length", str(len(nested)))
        handler.end_headers()
        handler.wfile.write(nested)

    with local_server(deep) as base:
        _, report = replay(report_env, f"{base}/webhooks/stripe", *AGAINST_A_STAND_IN, expect=1)
    assert report["layers"]["answered"] == {"400": 3} and report["notes"] == []


def test_a_value_that_is_not_a_signing_secret_is_refused_up_front(report_env) -> None:
    done = run_script(report_env, "--secret", "notasecret", "--generate", "1")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "invalid --secret" in lines[0] and "whsec_" in lines[0]
    assert "notasecret" not in lines[0], "the value is shown masked"
    assert "var/dev.env" in lines[0] and "stripe listen --print-secret" in lines[0]


def test_a_secret_the_endpoint_refuses_is_named_and_never_ok(stack, redis, tmp_path) -> None:
    s = stack()
    url = f"{s.start_web().url}/webhooks/stripe"
    report = tmp_path / "r.json"
    done = run_script(
        s.env, "--url", url, "--secret", OTHER_SECRET, "--generate", "1", "--json", str(report)
    )
    assert done.returncode == 1, done.stderr
    verdict = next(row for row in done.stdout.splitlines() if "checker" in row)
    assert "FAILED" in verdict and " ok " not in verdict, done.stdout
    said = " ".join(done.stderr.split())
    assert f"the endpoint refuses this secret ({fingerprint(OTHER_SECRET)})" in said, said
    assert "3 valid deliveries answered 400 signature_mismatch" in said
    assert "var/dev.env" in said and "stripe listen --print-secret" in said
    written = report.read_text()
    assert OTHER_SECRET not in written
    assert json.loads(written)["parameters"]["secret"] == fingerprint(OTHER_SECRET)
