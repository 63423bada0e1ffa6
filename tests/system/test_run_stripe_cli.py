"""scripts/run.sh --stripe-cli in a copy of the checkout: stripe listen (the real CLI, pinned
in tests/stripe-cli) runs as two more processes of the stack against a stand-in of Stripe
(STRIPE_API_KEY and STRIPE_API_BASE), its secret accepted under the ``cli`` label; without
a CLI, or with one that is not logged in, a one-line refusal before anything starts. The
listeners start only once the stack's web answers /readyz: the CLI never retries a forward
refused while gunicorn is not yet listening."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from ledger.settings import fingerprint
from ledgerctl import samples
from tests.support.processes import free_port, wait_until
from tests.support.stripe_cli import API_KEY, CLI_SECRET, binary, cli_env
from tests.support.stripe_standin import SNAPSHOT, THIN, StripeStandin
from tests.system.test_run_script import Running, checkout, run_sh  # noqa: F401 (fixtures)


def with_cli_on_path(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The CLI's environment, with ``stripe`` on PATH ahead of this one's."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    if not (bindir / "stripe").exists():
        (bindir / "stripe").symlink_to(binary())
    env = {**cli_env(tmp_path / "stripe-home"), **extra}
    return {**env, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}


def said_by(running: Running, name: str, starts: tuple[str, ...]) -> list[str]:
    """The lines process ``name`` printed that start with one of ``starts``, in order."""
    lines = (line.partition(" | ") for line in running.log.read_text().splitlines())
    mine = (text for head, _, text in lines if head.split()[-1:] == [name])
    return [text for text in mine if text.startswith(starts)]


def test_stripe_listen_runs_in_the_stack_with_its_secret_as_cli(
    run_sh,  # noqa: F811
    standin: StripeStandin,
    tmp_path: Path,
    rng,
) -> None:
    env = with_cli_on_path(tmp_path, STRIPE_API_BASE=standin.api_base)
    running, port = run_sh("scripts/run.sh --stripe-cli", **env)
    wait_until(
        lambda: standin.connected(SNAPSHOT) and standin.connected(THIN),
        timeout=60, what="both stripe listen processes connected",
    )  # fmt: skip
    assert {f"Bearer {API_KEY}"} == {s["authorization"] for s in standin.sessions}
    event = samples.payment_events(rng)[2]
    delivery = standin.send(event)
    answer = wait_until(lambda: standin.response(delivery), timeout=60, what="the CLI's answer")
    assert answer["status"] == 200, answer
    assert json.loads(answer["body"])["deliveries"] == 1
    assert answer["forward_url"] == f"http://127.0.0.1:{port}/webhooks/stripe"
    out = running.log.read_text()
    assert f"cli    {fingerprint(CLI_SECRET)}" in out and CLI_SECRET not in out
    assert "stripe listen runs here" in out
    masked = "Your webhook signing secret is whsec_***"  # the CLI's own line, masked
    # Awaited, not read once: in a loaded CI run it was not in the log yet when the first
    # answer had come (why was not found: the run passes alone and with both cores busy).
    wait_until(lambda: masked in running.log.read_text(), timeout=30, what="the CLI's line")
    running.ctrl_c_stops_everything()


def test_an_event_sent_as_soon_as_stripe_listen_connects_is_recorded(
    checkout: Path,  # noqa: F811
    standin: StripeStandin,
    tmp_path: Path,
    rng,
) -> None:
    """Nothing waits for the stack here but the event: it goes out the moment the snapshot
    listener's websocket opens, which is after the web answered /readyz."""
    env = with_cli_on_path(tmp_path, STRIPE_API_BASE=standin.api_base)
    port = free_port()
    env |= {"WEB_PORT": str(port), "REDIS_PORT": str(free_port())}
    running = Running(checkout, "scripts/run.sh --stripe-cli", env)
    try:
        wait_until(lambda: standin.connected(SNAPSHOT), timeout=120, what="stripe listen")
        delivery = standin.send(samples.payment_events(rng)[2])
        answer = wait_until(lambda: standin.response(delivery), timeout=30, what="its answer")
        assert answer["status"] == 200, answer
        waited = f"http://127.0.0.1:{port}/readyz answered after"
        starts = (waited, "Getting ready")
        for name in ("stripe-listen", "stripe-listen-thin"):  # each its wait, then its CLI
            said = wait_until(
                lambda n=name: (found := said_by(running, n, starts))[1:] and found,
                timeout=30, what=f"{name}'s CLI starting",
            )  # fmt: skip
            assert said[0].startswith(waited) and said[1] == "Getting ready...", said
        running.ctrl_c_stops_everything()
    finally:
        running.kill_leftovers()


@pytest.mark.parametrize("cli", ["missing", "not logged in"])
def test_without_a_usable_cli_one_line_and_nothing_starts(
    cli: str,
    checkout: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    env = with_cli_on_path(tmp_path)
    del env["STRIPE_API_KEY"]  # and a fresh home: not logged in
    if cli == "missing":
        env["PATH"] = os.environ["PATH"].replace(str(tmp_path / "bin") + os.pathsep, "")
        env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != ".")
    done = subprocess.run(
        ["scripts/run.sh", "--stripe-cli"], cwd=checkout, env=env,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("--stripe-cli")]
    assert len(lines) == 1, done.stderr
    wanted = "no `stripe` on PATH" if cli == "missing" else "(You have not configured API keys"
    assert wanted in lines[0]
    assert "Stripe webhook ledger" not in done.stdout  # no banner: nothing started
    assert not (checkout / "var" / "redis").exists()
