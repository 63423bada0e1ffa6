"""The real Stripe CLI for tests: the binary pinned in tests/stripe-cli (installed by
scripts/install_stripe_cli.sh, which scripts/test.sh runs), pointed at a local stand-in of
Stripe (tests/support/stripe_standin.py) with a fake test key, its telemetry and update
check off and its config in a temporary home. Tests that need it skip only without npm."""

import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import ROOT, spawn, stop, wait_until
from tests.support.stripe_standin import StripeStandin

PACKAGE = ROOT / "tests" / "stripe-cli"
API_KEY = "sk_test_standin_0123456789abcdef"
CLI_SECRET = "whsec_standin_cli_0123456789abcdef"


def installed_binary() -> Path | None:
    """The platform binary (@stripe/cli-<platform>/bin/stripe), not npm's node shim, so that
    a signal to the process reaches the CLI itself."""
    found = sorted(PACKAGE.glob("node_modules/@stripe/cli-*/bin/stripe*"))
    return found[0] if found else None


def binary() -> Path:
    """The pinned CLI, installed now if it is not yet; the test skips when there is no npm."""
    if installed_binary() is None:
        if shutil.which("npm") is None:
            pytest.skip("no npm: the pinned Stripe CLI (tests/stripe-cli) cannot be installed")
        subprocess.run([ROOT / "scripts" / "install_stripe_cli.sh"], check=True, timeout=300)
    found = installed_binary()
    assert found is not None, "npm ci ran but installed no Stripe CLI binary"
    return found


def cli_env(home: Path) -> dict[str, str]:
    """The CLI's environment: a fresh home (no profile, no login), no telemetry, the fake key."""
    home.mkdir(parents=True, exist_ok=True)
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "STRIPE_CLI_TELEMETRY_OPTOUT": "1",
        "STRIPE_API_KEY": API_KEY,
    }


class StripeCli:
    """Runs ``stripe`` against ``standin``; stops what it started."""

    def __init__(self, path: Path, standin: StripeStandin, home: Path) -> None:
        self.path, self.standin, self.home = path, standin, home
        self.env = cli_env(home)
        self.procs: list[subprocess.Popen] = []

    def print_secret(self) -> str:
        done = subprocess.run(
            [self.path, "listen", "--print-secret", "--api-base", self.standin.api_base],
            env=self.env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def listen(self, command: str, log: Path) -> subprocess.Popen:
        """A ``stripe listen …`` command line as given to a developer, run against the
        stand-in without the update check; returned once its websocket is open."""
        program, *args = shlex.split(command)
        assert program == "stripe", command
        events = args[args.index("--events") + 1]
        feature = "v2_events" if re.match(r"v\d+\.", events) else "webhooks"
        before = self.standin.connected(feature)
        argv = [str(self.path), *args, "--skip-update", "--api-base", self.standin.api_base]
        proc = spawn(argv, self.env, log)
        self.procs.append(proc)
        wait_until(
            lambda: self.standin.connected(feature) not in (None, before) or proc.poll(),
            timeout=60, what=f"stripe listen's {feature} websocket",
        )  # fmt: skip
        assert proc.poll() is None, log.read_text()
        return proc

    def stop(self) -> None:
        for proc in self.procs:
            stop(proc)


@pytest.fixture
def standin() -> Iterator[StripeStandin]:
    server = StripeStandin(CLI_SECRET).start()
    yield server
    server.stop()


@pytest.fixture
def stripe_cli(standin: StripeStandin, tmp_path: Path) -> Iterator[StripeCli]:
    cli = StripeCli(binary(), standin, tmp_path / "stripe-home")
    yield cli
    cli.stop()
