"""Each kind of process refuses to start on a wrong setting with one line per problem (the
variable, the value it got, what is allowed), exit code 2, no traceback: the web process
(gunicorn, checked once in its master), the RQ worker (also resolving FULFILMENT_ACTION;
``fulfilment-worker`` likewise), the sweeper, the CLI and the replay script. ``wait-redis``
says what it waits for and why it gave up."""

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.constants import SECRET
from tests.support.downstream_server import CountingDownstream
from tests.support.processes import BIN, ROOT, RedisServer, free_port

WEB = [str(BIN / "gunicorn"), "-c", "gunicorn.conf.py", "webhook.wsgi:app"]
WORKER = [str(BIN / "rq"), "worker", "-w", "rq.worker.SimpleWorker", "-c", "workers.rq_config"]
HA_WORKER = [str(BIN / "fulfilment-worker")]  # the Procfile's, for either topology
SWEEPER = [str(BIN / "webhook-ledger"), "sweep", "--loop"]
CLI = [str(BIN / "webhook-ledger"), "summary"]
REPLAY = [str(ROOT / "scripts" / "replay_events.py"), "--generate", "1"]


def env_with(**settings: str) -> dict[str, str]:
    """Only what a process needs to be found and run, plus ``settings``."""
    base = {"PATH": f"{BIN}{os.pathsep}/usr/bin:/bin", "HOME": os.environ.get("HOME", "/")}
    return {**base, "PYTHONPATH": str(ROOT), **settings}


def run(
    argv: list[str], env: dict[str, str], timeout: float = 60, cwd: Path = ROOT
) -> tuple[int, list[str]]:
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    return done.returncode, (done.stdout + done.stderr).splitlines()


def refuses(argv: list[str], env: dict[str, str]) -> list[str]:
    """The lines a process printed when it refused to start (asserting how it refused)."""
    code, lines = run(argv, env)
    assert code == 2, (code, lines)
    assert not any("Traceback" in line for line in lines), lines
    return lines


@pytest.mark.parametrize(
    ("argv", "extra"),
    [
        (WEB, {"WEB_CONCURRENCY": "4", "PORT": str(free_port())}),
        (WORKER, {}),
        (HA_WORKER, {}),
        (SWEEPER, {}),
        (CLI, {}),
        (REPLAY, {}),
    ],
    ids=["web", "worker", "fulfilment-worker", "sweeper", "cli", "replay"],
)
def test_every_process_refuses_a_wrong_setting_with_one_line_each(
    argv: list[str], extra: dict[str, str]
) -> None:
    wrong = {
        "STRIPE_WEBHOOK_TOLERANCE": "abc",
        "MAX_ATTEMPTS": "-1",
        "REDIS_URL": "redis://:PASSWORD456@127.0.0.1:6389/99",
        "LEASE_SECONDS": "5",
        "REVERSAL_PER_REFUND": "true",  # no REVERSAL_ACTION: it would change nothing
    }
    lines = refuses(argv, env_with(STRIPE_WEBHOOK_SECRET=SECRET, **wrong, **extra))
    assert lines == [
        "invalid setting REDIS_URL='redis://***@127.0.0.1:6389/99': database 99 is out of"
        " range; expected redis://[user:password@]host[:port][/db] (db 0-15), rediss://… (TLS)"
        " or unix:///path/to/socket[?db=N]",
        "invalid setting STRIPE_WEBHOOK_TOLERANCE=abc: expected a whole number of seconds, 0 or"
        " more (0: no check), at most 315532800 (ten years)",
        "invalid setting MAX_ATTEMPTS=-1: expected a whole number, from 1 to 1000",
        "invalid setting LEASE_SECONDS=5: expected at least FULFILMENT_TIMEOUT (10) + 2 = 12"
        " seconds: a call must end before its lease does",
        "invalid setting REVERSAL_PER_REFUND=true: REVERSAL_ACTION is not set, so no payment is"
        " reversed and this would change nothing: expected REVERSAL_ACTION naming what takes a"
        " payment back (docs/REVERSAL.md), or this unset",
    ]


SLIP = "FULFILLMENT_SQL"
"""FULFILMENT_SQL spelt the US way: taken, it left the effect unset without a word."""


@pytest.mark.parametrize(
    ("argv", "extra"),
    [(WEB, {"PORT": str(free_port())}), (WORKER, {}), (HA_WORKER, {}), (CLI, {})],
    ids=["web", "worker", "fulfilment-worker", "cli"],
)
def test_a_misspelt_setting_stops_start_up_with_one_line_naming_it(
    argv: list[str], extra: dict[str, str]
) -> None:
    shop = "postgresql://shop:pw-SECRET-7@127.0.0.1:9/shop"
    env = env_with(STRIPE_WEBHOOK_SECRET=SECRET, FULFILMENT_ACTION=shop, **extra)
    lines = refuses(argv, {**env, SLIP: "@examples/shop/grant.sql"})
    assert lines == [f"unknown setting {SLIP}: did you mean FULFILMENT_SQL?"]


@pytest.mark.parametrize("argv", [WEB, CLI, REPLAY], ids=["web", "cli", "replay"])
def test_a_number_is_ascii_digits_and_a_duration_one_redis_accepts(argv: list[str]) -> None:
    """A superscript or another script's digits, and a retention whose TTL Redis's EXPIRE
    would refuse: one line each, naming the setting, before anything starts."""
    wrong = {
        "REDIS_SENTINELS": "127.0.0.1:²",
        "WEB_CONCURRENCY": "٤",
        "EVENT_RETENTION_DAYS": str(10**12),
    }
    lines = refuses(argv, env_with(STRIPE_WEBHOOK_SECRET=SECRET, **wrong))
    named = sorted(line.split("=", 1)[0] for line in lines)
    expected = ["invalid setting EVENT_RETENTION_DAYS", "invalid setting REDIS_SENTINELS"]
    if argv is WEB:  # the web process's own setting, checked in gunicorn's master
        expected.append("invalid setting WEB_CONCURRENCY")
    assert named == expected, lines
    assert any("at most 36525 (100 years)" in line for line in lines), lines


def test_the_web_process_names_a_missing_secret_and_its_own_settings() -> None:
    env = env_with(STRIPE_WEBHOOK_SECRET="sk_live_SECRET123", WEB_CONCURRENCY="0")
    lines = refuses(WEB, env)
    assert [line.split(":")[0] for line in lines] == [
        "invalid setting WEB_CONCURRENCY=0",
        "invalid setting STRIPE_WEBHOOK_SECRET='sk_live_***'",
    ]
    assert "a Stripe API key, not a webhook signing secret" in lines[1]
    assert "SECRET123" not in "\n".join(lines)
    lines = refuses(WEB, env_with())
    assert lines[0].startswith("missing setting STRIPE_WEBHOOK_SECRET: expected one or more")


def test_the_web_process_names_an_access_log_it_cannot_write() -> None:
    """Not gunicorn's own "Error: '…' isn't writable", which names no setting."""
    env = env_with(
        STRIPE_WEBHOOK_SECRET=SECRET,
        GUNICORN_ACCESS_LOG="/nonexistent/dir/a.log",
        MAX_ATTEMPTS="0",
        PORT=str(free_port()),
    )
    assert refuses(WEB, env) == [
        "invalid setting MAX_ATTEMPTS=0: expected a whole number, from 1 to 1000",
        "invalid setting GUNICORN_ACCESS_LOG=/nonexistent/dir/a.log: its directory does not"
        " exist; expected - (standard output) or a file in a writable directory",
    ]


def test_the_web_process_refuses_a_port_in_use_at_once(tmp_path: Path) -> None:
    env = env_with(STRIPE_WEBHOOK_SECRET=SECRET, TMPDIR=str(tmp_path))
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        code, lines = run(WEB, {**env, "WEB_PORT": str(port)}, 20)
    assert code == 2, lines  # gunicorn's own retries would exit 1 after 5 s
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in lines
    assert not any("Traceback" in line for line in lines), lines
    assert list(tmp_path.iterdir()) == []  # no webhook-prometheus-* metrics folder left


@pytest.mark.parametrize(
    ("action", "why"),
    [
        ("no_such_shop.actions:fulfil", "ActionConfigError: cannot import no_such_shop.actions"),
        ("tests.support.constants:SECRET", "ActionConfigError: tests.support.constants:SECRET is"),
        ("sqlite:///{file}/downstream.sqlite3", "Error"),  # its directory is a file
        ("http://[::1/fulfil", "expected sqlite:///PATH, postgresql://USER@HOST:PORT/DB"),
    ],
)
@pytest.mark.parametrize("worker", [WORKER, HA_WORKER], ids=["rq worker", "fulfilment-worker"])
def test_the_worker_resolves_the_action_before_its_first_job(
    worker: list[str], action: str, why: str, tmp_path: Path
) -> None:
    (tmp_path / "file").write_text("not a directory")
    spec = action.format(file=tmp_path / "file")
    lines = refuses(worker, env_with(FULFILMENT_ACTION=spec))
    assert len(lines) == 1 and lines[0].startswith("invalid setting FULFILMENT_ACTION="), lines
    assert why in lines[0]


SHOP_MODULE = """import os
DATABASE = os.environ["SHOP_DATABASE_URL"]  # not set: importing this module raises


def fulfil(purchase):
    return {}
"""


@pytest.mark.parametrize(
    ("settings", "setting", "why"),
    [
        (
            {"FULFILMENT_ACTION": "shop_actions:fulfil"},
            "FULFILMENT_ACTION",
            "cannot import shop_actions:fulfil: importing it raised KeyError: 'SHOP_DATABASE_URL'",
        ),
        (
            {"FULFILMENT_EFFECT": "shop_actions:fulfil"},
            "FULFILMENT_EFFECT",
            "cannot import shop_actions:fulfil: importing it raised KeyError",
        ),
        (
            {"REVERSAL_ACTION": "no_such_shop.refunds:take_back"},
            "REVERSAL_ACTION",
            "cannot import no_such_shop.refunds:take_back: No module named 'no_such_shop'",
        ),
    ],
    ids=["action raising on import", "effect raising on import", "reversal not found"],
)
@pytest.mark.parametrize("worker", [WORKER, HA_WORKER], ids=["rq worker", "fulfilment-worker"])
def test_a_module_function_that_cannot_be_loaded_is_named_by_its_setting(
    worker: list[str], settings: dict[str, str], setting: str, why: str, tmp_path: Path
) -> None:
    """The user's module raising while it is imported (a variable it reads not set) stops
    the worker with one line, as a missing module does; each names the setting that names
    the function, REVERSAL_ACTION's too."""
    (tmp_path / "shop_actions.py").write_text(SHOP_MODULE)
    db = f"sqlite:///{tmp_path / 'downstream.sqlite3'}"
    found = f"{ROOT}{os.pathsep}{tmp_path}"
    env = env_with(PYTHONPATH=found, **({"FULFILMENT_ACTION": db} | settings))
    lines = refuses(worker, env)
    assert len(lines) == 1 and lines[0].startswith(f"invalid setting {setting}="), lines
    assert why in lines[0]


@pytest.mark.parametrize("worker", [WORKER, HA_WORKER], ids=["rq worker", "fulfilment-worker"])
def test_the_worker_refuses_an_http_action_that_moved_for_good(worker: list[str]) -> None:
    """Its one HEAD (no purchase is sent) is answered 308: FULFILMENT_ACTION is wrong."""
    with CountingDownstream() as downstream:
        downstream.redirect = (308, "https://shop.example/new/PATHSECRET")
        lines = refuses(worker, env_with(FULFILMENT_ACTION=downstream.url))
        assert [method for method, _ in downstream.visits] == ["HEAD"] and not downstream.bodies
    assert len(lines) == 1 and lines[0].startswith("invalid setting FULFILMENT_ACTION="), lines
    assert "the endpoint moved (Location on https://shop.example:443)" in lines[0]
    assert "PATHSECRET" not in lines[0]


def test_the_worker_starts_with_a_good_action_and_creates_the_sqlite_file(tmp_path) -> None:
    """The counterpart: the same check lets a good configuration through (burst: it returns)."""
    server = RedisServer(tmp_path / "redis").start()
    try:
        db = tmp_path / "var" / "downstream.sqlite3"
        env = env_with(REDIS_URL=server.url, FULFILMENT_ACTION=f"sqlite:///{db}")
        code, lines = run([*WORKER, "--burst"], env)
        assert code == 0, lines
        assert db.exists() and any("Listening on fulfilment" in line for line in lines)
    finally:
        server.stop()


SHOP_FULFIL = """def grant(purchase):
    return {"granted": purchase["payment_key"]}


def grants_for(payment_key):
    raise RuntimeError("the probe was imported")
"""


def test_a_module_function_in_the_working_directory_is_found(tmp_path: Path) -> None:
    """A merchant's module beside the Procfile, in the directory the processes run from, no
    PYTHONPATH: the Procfile's fulfilment-worker finds it as ``rq worker`` does (its
    ``--path .``), and so does prove-action (its probe is asked once: here it raises)."""
    (tmp_path / "shop_fulfil.py").write_text(SHOP_FULFIL)
    server = RedisServer(tmp_path / "redis").start()
    try:
        env = env_with(REDIS_URL=server.url, FULFILMENT_ACTION="shop_fulfil:grant")
        del env["PYTHONPATH"]
        for worker in (WORKER, HA_WORKER):
            code, lines = run([*worker, "--burst"], env, cwd=tmp_path)
            assert code == 0, (worker, lines)
        prove = [str(BIN / "webhook-ledger"), "prove-action", "--effects", "shop_fulfil:grants_for"]
        code, lines = run(prove, env, cwd=tmp_path)
        assert (code, lines) == (2, ["effects probe: RuntimeError: the probe was imported"])
    finally:
        server.stop()


def test_wait_redis_says_what_it_waits_for_and_why_it_gave_up() -> None:
    port = free_port()  # nothing listens there
    url, shown = f"redis://:PASSWORD456@127.0.0.1:{port}/0", f"redis://***@127.0.0.1:{port}/0"
    started = time.monotonic()
    code, lines = run([*CLI[:1], "wait-redis", "--timeout", "1"], env_with(REDIS_URL=url))
    assert code == 3 and time.monotonic() - started < 30
    assert lines[0] == f"waiting for Redis at {shown} (up to 1 s)"
    assert lines[-1].startswith(f"gave up after 1 s: Redis at {shown} did not answer: ")
    assert "Connection refused" in lines[-1] and "PASSWORD456" not in "\n".join(lines)


def test_wait_redis_gives_up_on_time_when_redis_accepts_but_never_answers() -> None:
    """A stopped Redis (SIGSTOP, a frozen VM) still has its connections accepted by the
    kernel: each PING waits for an answer that never comes. Were each to wait
    REDIS_SOCKET_TIMEOUT (30 s here), retried REDIS_RETRIES (3) times, a 2 s wait would take
    two minutes; each PING gives up within PROBE_SECONDS."""
    with socket.create_server(("127.0.0.1", 0)) as mute:  # accepts, never answers
        url = f"redis://127.0.0.1:{mute.getsockname()[1]}/0"
        env = env_with(REDIS_URL=url, REDIS_SOCKET_TIMEOUT="30")
        started = time.monotonic()
        code, lines = run([*CLI[:1], "wait-redis", "--timeout", "2"], env, timeout=150)
        took = time.monotonic() - started
    assert code == 3 and lines[-1].startswith("gave up after 2 s: Redis at "), lines
    assert "Timeout" in lines[-1], lines
    # not one whole REDIS_SOCKET_TIMEOUT (the process's own start counts, slow when busy)
    assert took < 20, took


@pytest.mark.parametrize(
    ("extra", "userinfo", "db", "why"),
    [
        (["--databases", "4"], "", "5", "DB index is out of range"),
        (["--requirepass", "right"], ":wrong@", "0", "invalid username-password pair"),
    ],
)
def test_wait_redis_gives_up_at_once_when_redis_refuses(
    tmp_path: Path, extra: list[str], userinfo: str, db: str, why: str
) -> None:
    """Redis answered: waiting cannot help (a wrong database or password), so it says so
    at once instead of after its 30 s."""
    server = RedisServer(tmp_path / "redis", extra=extra).start()
    try:
        url = f"redis://{userinfo}127.0.0.1:{server.port}/{db}"
        started = time.monotonic()
        code, lines = run([*CLI[:1], "wait-redis"], env_with(REDIS_URL=url), timeout=60)
        assert code == 3 and time.monotonic() - started < 25, lines
        masked = "***@" if userinfo else ""
        assert lines[-1].startswith(f"gave up: Redis at redis://{masked}127.0.0.1:{server.port}")
        assert why in lines[-1] and "wrong" not in lines[-1]
    finally:
        server.stop()


def test_wait_redis_waits_for_the_replicas_a_write_needs(tmp_path: Path) -> None:
    """With LEDGER_MIN_REPLICAS the primary refuses writes (NOREPLICAS) until that many
    replicas are online: wait-redis waits for them too, and says so when it gives up."""
    primary = RedisServer(tmp_path / "primary").start()
    replica: RedisServer | None = None
    try:
        env = env_with(REDIS_URL=primary.url, LEDGER_MIN_REPLICAS="1")
        code, lines = run([*CLI[:1], "wait-redis", "--timeout", "1"], env)
        assert code == 3 and lines[-1] == "gave up after 1 s: 0 of 1 replica(s) online", lines
        waiting = subprocess.Popen(
            [*CLI[:1], "wait-redis", "--timeout", "60"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        replica = RedisServer(
            tmp_path / "replica", extra=["--replicaof", "127.0.0.1", str(primary.port)]
        ).start()
        out, _ = waiting.communicate(timeout=90)
        assert waiting.returncode == 0, out
        assert "waiting for 1 replica(s) of redis://127.0.0.1:" in out
        assert "1 replica(s) online after" in out
    finally:
        if replica is not None:
            replica.stop()
        primary.stop()
