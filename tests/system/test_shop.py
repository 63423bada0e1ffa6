"""The example shop (examples/shop) with the real service: signed Checkout events through
gunicorn's endpoint, a real worker with the PostgreSQL action granting into the shop's own
table, and the shop's landing page showing the entitlement once by its Checkout Session id
(never by the email or order reference anyone could type); refunded in full, revoked once; with
REVERSAL_PER_REFUND, a partial refund shown as the part taken back, still granted. And
examples/shop/run.sh refusing to start without stopping the PostgreSQL server an earlier
run left, while anything would refuse the start or a process uses that server."""

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import requests

from examples.shop import create_app, migrate
from ledger.downstream import open_downstream
from ledgerctl import samples
from tests.support.constants import OPS_TOKEN
from tests.support.helpers import payment_key_of, settled_as
from tests.support.postgres import binaries, shop_actions
from tests.support.processes import ROOT, free_port, shared_venv, wait_until
from tests.support.refunds import refund_events
from tests.support.replay import replay, run_script

GRANT = f"@{ROOT / 'examples' / 'shop' / 'grant.sql'}"
REVOKE = f"@{ROOT / 'examples' / 'shop' / 'revoke.sql'}"


def test_a_checkout_purchase_shows_one_entitlement_revoked_once_refunded(
    stack, redis, postgres_url
) -> None:
    migrate(postgres_url)
    migrate(postgres_url)  # idempotent: run.sh migrates on every start
    s = stack(
        **shop_actions(postgres_url),
    )
    s.start_service(workers=2)
    events = samples.payment_events(random.Random(4), checkout=True)
    paid_intent, session = events[2], events[3]
    order = session["data"]["object"]
    order["client_reference_id"] = "order-42"
    order["customer_details"]["email"] = "ada@example.com"
    for event in (session, paid_intent, session, paid_intent):  # each delivered twice
        assert s.send(samples.encode(event)).status_code == 200
    pk = payment_key_of(paid_intent)
    wait_until(lambda: settled_as(redis, pk, "fulfilled"), what=f"{pk} fulfilled")
    shop = create_app({"DATABASE_URL": postgres_url, "TESTING": True}).test_client()
    landing = f"/?session_id={order['id']}"
    page = shop.get(landing).get_data(as_text=True)
    assert page.count('class="entitlement"') == 1, page
    assert pk in page and "pro-plan" in page
    assert "No entitlement yet" in shop.get("/?session_id=cs_test_other").get_data(as_text=True)
    for guess in ("ref=order-42", "email=ada@example.com", ""):  # nothing but the session
        page = shop.get(f"/?{guess}").get_data(as_text=True)
        assert pk not in page and "success_url" in page, page
    amount = paid_intent["data"]["object"]["amount_received"]
    for event in refund_events(random.Random(5), pk, amount, amount) * 2:  # sent twice
        assert s.send(samples.encode(event)).status_code == 200
    wait_until(lambda: settled_as(redis, pk, "reversed"), what=f"{pk} reversed")
    page = shop.get(landing).get_data(as_text=True)
    assert page.count('class="entitlement"') == 0 and page.count('class="revoked"') == 1, page
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute("SELECT revoked_at FROM entitlements WHERE payment_key = %s", (pk,))
        assert [row[0] is not None for row in rows] == [True]  # one grant, revoked
        found = conn.execute(
            "SELECT idempotency_key FROM webhook_ledger_effects WHERE payment_key = %s", (pk,)
        )
        assert sorted(row[0] for row in found) == [f"fulfil:{pk}", f"reverse:{pk}"]  # once each


def test_the_landing_page_finds_a_grant_made_before_its_session_came(
    stack, redis, postgres_url
) -> None:
    """Paid, fulfilled with no session (its event late): the grant has no session id, so the
    page found nothing for ever; triggering the fulfilment as Stripe's guide asks (the
    service's landing-page trigger), it finds the grant by the payment the service names."""
    migrate(postgres_url)
    s = stack(FULFILMENT_ACTION=postgres_url, FULFILMENT_SQL=GRANT)
    web = s.start_service(workers=1)
    events = samples.payment_events(random.Random(7), checkout=True)
    paid_intent, session = events[2], events[3]
    assert s.send(samples.encode(paid_intent)).status_code == 200
    pk = payment_key_of(paid_intent)
    wait_until(lambda: settled_as(redis, pk, "fulfilled"), what=f"{pk} fulfilled")
    assert s.send(samples.encode(session)).status_code == 200  # after the call
    landing = f"/?session_id={session['data']['object']['id']}"
    alone = create_app({"DATABASE_URL": postgres_url}).test_client()
    assert "No entitlement yet" in alone.get(landing).get_data(as_text=True)
    linked = {"DATABASE_URL": postgres_url, "SERVICE_URL": web.url, "OPS_TOKEN": OPS_TOKEN}
    page = create_app(linked).test_client().get(landing).get_data(as_text=True)
    assert page.count('class="entitlement"') == 1 and pk in page, page
    for other in ("cs_test_nothing", "..", "cs_1/../../payments"):  # unknown, or no session id
        unknown = create_app(linked).test_client().get(f"/?session_id={other}")
        assert 'id="service-error"' in unknown.get_data(as_text=True)


def reversed_amount(url: str, pk: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT reversed_amount FROM entitlements WHERE payment_key = %s", (pk,))
        return int(row.fetchone()[0])


def test_a_partial_refund_reversed_on_its_own_shows_on_the_page_still_granted(
    stack, redis, postgres_url
) -> None:
    """REVERSAL_PER_REFUND: a quarter of 120.00 USD refunded is taken back on its own
    (revoke.sql adds it to reversed_amount); the page says how much, the entitlement still
    granted; the rest refunded revokes it."""
    migrate(postgres_url)
    s = stack(
        **shop_actions(postgres_url),
        REVERSAL_PER_REFUND="true",
    )
    s.start_service(workers=2)
    events = samples.payment_events(random.Random(5), checkout=True)
    paid_intent, session = events[2], events[3]
    landing = f"/?session_id={session['data']['object']['id']}"
    for event in (session, paid_intent):
        assert s.send(samples.encode(event)).status_code == 200
    pk = payment_key_of(paid_intent)
    wait_until(lambda: settled_as(redis, pk, "fulfilled"), what=f"{pk} fulfilled")
    assert paid_intent["data"]["object"]["amount_received"] == 12000
    shop = create_app({"DATABASE_URL": postgres_url, "TESTING": True}).test_client()
    page = shop.get(landing).get_data(as_text=True)
    assert page.count('class="entitlement"') == 1 and "30.00" not in page, page
    for event in refund_events(random.Random(6), pk, 12000, 3000):
        assert s.send(samples.encode(event)).status_code == 200
    wait_until(lambda: reversed_amount(postgres_url, pk) == 3000, what=f"{pk}'s refund reversed")
    page = shop.get(landing).get_data(as_text=True)
    assert page.count('class="entitlement"') == 1, page  # still granted
    assert '<td class="refunded">30.00 of 120.00 USD</td>' in page, page
    assert "<td>120.00 USD</td>" in page, page  # the amount paid, as people read it
    for event in refund_events(random.Random(7), pk, 12000, 9000, refunded_before=3000):
        assert s.send(samples.encode(event)).status_code == 200
    wait_until(lambda: settled_as(redis, pk, "reversed"), what=f"{pk} reversed")
    page = shop.get(landing).get_data(as_text=True)
    assert page.count('class="revoked"') == 1 and "30.00 of" not in page, page


def test_a_replay_beside_the_shop_counts_effects_from_the_ledger(
    stack, redis, postgres_url, tmp_path
) -> None:
    """Run from another terminal without the shop's FULFILMENT_ACTION (its password stays in
    run.sh), with an earlier run's SQLite downstream file on disk: the workers' calls went to
    PostgreSQL, so that file is not read as their record, and nothing is called unfulfilled."""
    migrate(postgres_url)
    s = stack(FULFILMENT_ACTION=postgres_url, FULFILMENT_SQL=GRANT)
    web = s.start_service(workers=2)
    old = tmp_path / "downstream.sqlite3"
    open_downstream(str(old)).close()  # what a run with the default action left
    env = {k: v for k, v in s.env.items() if k != "FULFILMENT_SQL"}
    env["FULFILMENT_ACTION"] = f"sqlite:///{old}"
    args = ("--generate", "2", "--expect-once")
    _, report = replay(env, f"{web.url}/webhooks/stripe", *args, out=tmp_path / "r.json")
    assert report["layers"]["downstream"]["source"] == "ledger (no downstream record)"
    assert report["layers"]["downstream"]["effects"] == 2 and report["findings"]["ok"]
    assert report["layers"]["downstream"]["calls"] is None  # the ledger does not count calls
    [note] = [n for n in report["notes"] if "calls went to" in n]
    assert note.startswith("the workers' calls went to postgresql:") and str(old) in note
    assert postgres_url.split("@")[0].split(":")[-1] not in json.dumps(report)  # no password


def test_a_replay_checks_the_merchant_s_own_table_with_effects_sql(
    stack, redis, postgres_url, tmp_path
) -> None:
    """--expect-once with --effects-sql counts each payment's entitlement rows in the shop's
    own table (merchant review: it read the ledger's marks only); a query that finds two
    rows for each payment fails the run, naming them duplicated; and with an action that is
    no database and no --effects-db, one line and exit 2, before anything is sent."""
    migrate(postgres_url)
    s = stack(FULFILMENT_ACTION=postgres_url, FULFILMENT_SQL=GRANT)
    url = f"{s.start_service(workers=2).url}/webhooks/stripe"
    rows = "SELECT count(*) FROM entitlements WHERE payment_key = %(payment_key)s"
    args = ("--generate", "2", "--expect-once", "--effects-sql", rows)
    _, report = replay(s.env, url, *args, out=tmp_path / "r.json")
    assert report["layers"]["downstream"]["source"] == "your tables (--effects-sql)"
    assert report["layers"]["downstream"]["effects"] == 2 and report["findings"]["ok"]
    double = rows.replace("count(*)", "2 * count(*)")
    args = ("--generate", "2", "--expect-once", "--effects-sql", double)
    status, broken = replay(s.env, url, *args, out=tmp_path / "r2.json", expect=1)
    assert status == 1 and len(broken["findings"]["duplicated"]) == 2
    elsewhere = {k: v for k, v in s.env.items() if k != "FULFILMENT_SQL"}
    elsewhere["FULFILMENT_ACTION"] = "https://shop.test/fulfil"
    refused = run_script(elsewhere, "--url", url, "--generate", "1", "--effects-sql", rows)
    said = "--effects-sql: FULFILMENT_ACTION is a http action: give --effects-db\n"
    assert (refused.returncode, refused.stderr) == (2, said)


COPIED = ("scripts/run.sh", "scripts/bootstrap.sh", "examples", "Procfile", "gunicorn.conf.py")
COPIED += ("pyproject.toml", "uv.lock", "config")
PYCACHE = shutil.ignore_patterns("__pycache__")


def as_postgres(*argv: str) -> list[str]:
    """PostgreSQL refuses to run as root (run.sh's as_postgres)."""
    return ["runuser", "-u", "postgres", "--", *argv] if os.getuid() == 0 else list(argv)


def checkout_copy() -> Path:
    """What examples/shop/run.sh needs of the checkout, copied under /tmp and open to all
    (the postgres user enters no root-only folder), the tests' venv linked in."""
    root = Path(tempfile.mkdtemp(prefix="ledger-shop-"))
    root.chmod(0o755)
    for name in COPIED:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, root / name, ignore=PYCACHE)
        else:
            shutil.copy2(ROOT / name, root / name)
    (root / ".venv").symlink_to(shared_venv())
    return root


def shop_env(**settings: str) -> dict[str, str]:
    """The environment of a person who runs examples/shop/run.sh: no Stripe or ops settings of
    theirs, every port free."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STRIPE_", "OPS_", "PYTEST"))}
    env |= {"SHOP_PG_PORT": str(free_port()), "SHOP_PORT": str(free_port())}
    return env | {"WEB_PORT": str(free_port()), "REDIS_PORT": str(free_port()), **settings}


def pg_ctl(data: Path, *args: str) -> int:
    """pg_ctl on the server of ``data``, as the postgres user when run as root."""
    argv = as_postgres(str(binaries() / "pg_ctl"), "-D", str(data), *args)
    return subprocess.run(argv, capture_output=True).returncode


class Left:
    """A copy of the checkout with the shop's PostgreSQL server running on var/shop/pg, as
    a killed run.sh leaves it."""

    def __init__(self) -> None:
        self.root = checkout_copy()
        shop = self.root / "var" / "shop"
        shop.mkdir(parents=True)
        (shop / "password").write_text("pw-left-1\n")
        if os.getuid() == 0:
            shutil.chown(shop, "postgres")
            shutil.chown(shop / "password", "postgres")
        self.data, self.port = shop / "pg", free_port()
        initdb = [str(binaries() / "initdb"), "-D", str(self.data), "-U", "shop", "--no-sync"]
        initdb += [f"--pwfile={shop / 'password'}", "--auth=scram-sha-256"]
        subprocess.run(as_postgres(*initdb), check=True, capture_output=True)
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=''"
        self.pg_ctl("-l", str(shop / "postgres.log"), "-w", "start", "-o", options)

    def pg_ctl(self, *args: str) -> int:
        return pg_ctl(self.data, *args)

    def running(self) -> bool:
        return self.pg_ctl("status") == 0

    def run_sh(self, **settings: str) -> subprocess.CompletedProcess[str]:
        env = shop_env(**{"SHOP_PG_PORT": str(self.port), **settings})
        command = ["examples/shop/run.sh"]
        return subprocess.run(
            command, cwd=self.root, env=env, capture_output=True, text=True, timeout=120
        )

    def remove(self) -> None:
        self.pg_ctl("-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def left() -> Iterator[Left]:
    server = Left()
    yield server
    server.remove()


HOLD = (
    "import sys; from pathlib import Path; from ledgerctl import local_guard;"
    " assert local_guard.hold(Path('var/redis')) is None; print('held', flush=True);"
    " sys.stdin.read()"  # held until the test closes its stdin (or is gone)
)


def test_run_sh_refuses_before_it_stops_the_server_an_earlier_run_left(left: Left) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD], cwd=left.root, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        held = left.run_sh()
        assert held.returncode == 2, held
        assert f"var/redis: data folder held by scripts/run.sh pid {holder.pid}" in held.stderr
    finally:
        holder.kill()
        holder.communicate()
    assert "stopping" not in held.stdout and left.running()

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = left.run_sh(SHOP_PORT=str(port))
    assert busy.returncode == 1 and f"port {port} is in use; set SHOP_PORT" in busy.stderr
    assert "stopping" not in busy.stdout and left.running()

    url = f"postgresql://shop:pw-left-1@127.0.0.1:{left.port}/postgres"
    with psycopg.connect(url):
        used = left.run_sh()
    assert used.returncode == 1, used
    assert f"port {left.port}) is in use by pid {os.getpid()} (" in used.stderr
    assert "stopping" not in used.stdout and left.running()


def test_run_sh_as_written_serves_the_shop_with_the_service_and_stops_on_ctrl_c() -> None:
    """README's command as written, nothing set: PostgreSQL made and started, the service
    and the shop's page up, the page asking the service (with the local ops token) about a
    session, and Ctrl-C stopping it all. It exited at once (``OPS_TOKEN: unbound variable``
    under ``set -u``), which the refusal tests above never reached."""
    root = checkout_copy()
    env = shop_env()
    shop, web = f"http://127.0.0.1:{env['SHOP_PORT']}", f"http://127.0.0.1:{env['WEB_PORT']}"
    run = subprocess.Popen(
        ["examples/shop/run.sh"],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        up = lambda: answers(f"{web}/readyz") and answers(shop)  # noqa: E731
        wait_until(lambda: run.poll() is not None or up(), 120, 0.5, "the stack")
        assert run.poll() is None, "run.sh ended before the stack was up"
        page = requests.get(f"{shop}/?session_id=cs_test_unknown", timeout=15).text
        # the service took the token and looked: an unknown session, no STRIPE_API_KEY to ask
        assert 'id="service-error"' in page and "(stripe_api_key_missing)" in page, page
    finally:
        os.killpg(run.pid, signal.SIGINT)
        said, _ = run.communicate(timeout=90)
        data = root / "var" / "shop" / "pg"
        left_running = (data / "postmaster.pid").exists()
        if left_running:  # stop what the run should have, before its folder goes
            pg_ctl(data, "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)
    assert "unbound variable" not in said, said
    assert run.returncode in (0, 130) and not left_running, said


def answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False
