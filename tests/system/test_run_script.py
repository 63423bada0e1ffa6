"""scripts/run.sh as a newcomer meets it, in a copy of the checkout (its own var/, free
ports): the banner shows the active webhook secrets by label and fingerprint, never a
secret; a "ready" line follows once /readyz answers; Ctrl-C stops every process, also when
the output goes through a pipe whose reader has exited. And the README's commands exist
as written."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from ledger.ports import port_in_use
from ledger.settings import fingerprint
from tests.support.processes import ROOT, free_port, shared_venv, wait_until

COPIED = ("scripts/run.sh", "scripts/bootstrap.sh", "Procfile", "gunicorn.conf.py")
COPIED += ("pyproject.toml", "uv.lock", "config")
CLI_SECRET = "whsec_from_stripe_listen_0123456789"
IN_USE = "Address already in use"


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """What run.sh needs of a clone, with this checkout's .venv (bootstrap has nothing to do)."""
    root = tmp_path / "clone"
    for name in COPIED:
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy2
        copy(ROOT / name, target)
    (root / ".venv").symlink_to(shared_venv())
    return root


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (honcho's children run in sessions of their own)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError):
            continue
        parents.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


def alive(pids: list[int]) -> list[int]:
    """Those still running (not gone, not a zombie waiting for its parent)."""
    running = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            running.append(pid)
    return running


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


class Running:
    """``bash -c COMMAND`` in the checkout, in a session of its own like a terminal's
    foreground job: Ctrl-C is SIGINT to its process group."""

    def __init__(self, root: Path, command: str, env: dict[str, str]) -> None:
        self.log = root / "out.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                ["bash", "-c", command], cwd=root, env=env, stdout=out, stderr=out,
                start_new_session=True,
            )  # fmt: skip

    def ctrl_c_stops_everything(self) -> float:
        """Seconds until every process it started was gone after Ctrl-C."""
        pids = descendants(self.proc.pid)
        assert len(pids) >= 8, pids  # redis, gunicorn + 2, 2 workers, sweeper, their shells
        started = time.monotonic()
        os.killpg(self.proc.pid, signal.SIGINT)
        wait_until(lambda: not alive(pids), timeout=60, interval=0.2, what="every process gone")
        self.proc.wait(30)
        seconds = time.monotonic() - started
        self.stopped_redis_last()
        return seconds

    def stopped_redis_last(self) -> None:
        """Redis is stopped once every process using it is (ledgerctl/stack_stop.py), so
        none of them met it gone while finishing its work."""
        text = self.log.read_text(errors="replace")
        after = text.split("SIGINT received", 1)[-1]
        stopped = re.findall(r"\| (\S+) stopped \(rc=", after)
        if not stopped:  # the reader went away (| head): nothing was written
            return
        assert [name.split(".")[0] for name in stopped][-1:] == ["redis"], stopped
        assert sum(name.startswith("redis") for name in stopped) == 1, stopped
        assert "Connection refused" not in after and "could not connect" not in after, after

    def kill_leftovers(self) -> None:
        for pid in alive([self.proc.pid, *descendants(self.proc.pid)]):
            os.kill(pid, signal.SIGKILL)
        self.proc.wait(30)  # reaped: a test that failed leaves no process to the next one


@pytest.fixture
def run_sh(checkout: Path) -> Iterator:
    started: list[Running] = []
    web, redis = free_port(), free_port()
    env = {**os.environ, "WEB_PORT": str(web), "REDIS_PORT": str(redis)}
    env = {k: v for k, v in env.items() if not k.startswith(("STRIPE_", "OPS_", "PYTEST"))}

    def start(command: str = "scripts/run.sh", **extra: str) -> tuple[Running, int]:
        running = Running(checkout, command, {**env, **extra})
        started.append(running)
        wait_until(lambda: ready(web), timeout=120, interval=0.2, what="/readyz")
        return running, web

    yield start
    for running in started:
        running.kill_leftovers()


def test_banner_secrets_by_fingerprint_and_a_ready_line_after_readyz(run_sh, checkout) -> None:
    """And another terminal gets what the banner tells it to source: a REVERSAL_ACTION
    whose key the banner cannot show reaches the tools (their event types include the
    disputes a reversal needs), from var/run.env, which only this user reads."""
    reversal = f"http://127.0.0.1:{free_port()}/revoke?key=REVOKE-SECRET-5"
    running, port = run_sh(
        STRIPE_WEBHOOK_SECRET=CLI_SECRET,
        STRIPE_WEBHOOK_SECRET_LABELS="cli",
        REVERSAL_ACTION=reversal,
    )
    wait_until(lambda: "ready:" in running.log.read_text(), 30, what="the ready line")
    sourced = running.log.read_text().split("and in another terminal: ")[1].split("   (")[0]
    assert sourced == ". var/run.env" and (checkout / "var/run.env").stat().st_mode & 0o077 == 0
    env = {"PATH": os.environ["PATH"]}  # a new terminal: none of the run's settings
    tools = ".venv/bin/webhook-ledger event-types && echo $STRIPE_MODE $REVERSAL_ACTION"
    command = f"{sourced} && {tools}"
    done = subprocess.run(["bash", "-c", command], cwd=checkout, env=env, capture_output=True)
    assert done.returncode == 0, done.stderr
    assert b"charge.dispute.created" in done.stdout and done.stdout.endswith(
        f"test {reversal}\n".encode()  # test mode: fulfil-session there records as this run does
    )
    running.ctrl_c_stops_everything()
    out = running.log.read_text()
    assert "REVOKE-SECRET-5" not in out
    local = re.search(r"DEV_WEBHOOK_SECRET=(\S+)", (checkout / "var/dev.env").read_text())
    assert local is not None
    assert f"cli    {fingerprint(CLI_SECRET)}" in out
    assert f"local  {fingerprint(local[1])}  var/dev.env" in out
    assert CLI_SECRET not in out and local[1] not in out
    ready_line = next(line for line in out.splitlines() if "ready:" in line)
    assert f"endpoint http://127.0.0.1:{port}/webhooks/stripe" in ready_line
    assert f"dashboard http://127.0.0.1:{port}/ops/" in ready_line
    assert out.index("Listening at:") < out.index("ready:")  # after the server, not a banner
    # A socket in each worker: gunicorn's own line names none, the service's names them.
    assert f"Listening at: http://127.0.0.1:{port} (a socket in each worker)" in out
    assert not re.search(r"Listening at:  \(\d+\)", out), out  # gunicorn's, naming none
    assert len(re.findall(rf"Worker \d+ listening at: http://127.0.0.1:{port}", out)) == 2


def test_the_ops_api_answers_the_local_token_as_operating_md_says(run_sh, checkout) -> None:
    """OPERATING.md's command for the ops API beside scripts/run.sh, run as written (the port
    moved): the name it sources from var/dev.env is the token the service takes."""
    running, port = run_sh()
    shown = re.search(r"`(\. var/dev\.env; curl [^`]+)`", (ROOT / "docs/OPERATING.md").read_text())
    assert shown is not None, "OPERATING.md shows no command for the local ops token"
    command = " ".join(shown[1].split()).replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    env = {"PATH": os.environ["PATH"]}  # a new terminal: no OPS_TOKEN
    done = subprocess.run(["bash", "-c", command], cwd=checkout, env=env, capture_output=True)
    assert done.returncode == 0 and "fulfilment" in json.loads(done.stdout), done.stdout
    running.ctrl_c_stops_everything()


def test_ctrl_c_stops_everything_when_the_output_reader_has_exited(run_sh) -> None:
    """``scripts/run.sh | head -n 1``: head exits after the first line, so every later write
    meets a closed pipe; honcho's own start used to die of it on Ctrl-C and leave Redis,
    gunicorn, the workers and the sweeper running."""
    running, _ = run_sh("scripts/run.sh | head -n 1")
    seconds = running.ctrl_c_stops_everything()
    assert seconds < 60  # bounded by honcho's SIGKILL 5 s after its SIGTERM, plus slack


def test_readme_commands_exist_as_written() -> None:
    """Every command line of the README's code blocks, and of the ``sh`` blocks of
    CONTRIBUTING and docs/ (their other blocks are diagrams and configs), names an executable
    script, a program of .venv/bin, or webhook-ledger commands (``a | b`` alternatives) with
    the options shown."""
    from ledgerctl.cli import main

    blocks = re.findall(r"```[a-z]*\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    for page in [ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]:
        blocks += re.findall(r"```sh\n(.*?)```", page.read_text(), re.S)
    checked = 0
    for line in (line for block in blocks for line in block.splitlines()):
        words = line.removeprefix("$ ").split("  #")[0].split()
        while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # VAR=value before a command
            words.pop(0)
        if not words:
            continue
        if words[0].startswith(("scripts/", ".venv/bin/")):
            assert os.access(ROOT / words[0], os.X_OK), line
        elif words[0] in ("webhook-ledger", "replay-events"):
            assert os.access(ROOT / ".venv" / "bin" / words[0], os.X_OK), line
        else:
            continue
        checked += 1
        if words[0] != "webhook-ledger":
            continue
        for part in re.split(r"\s\|\s", " ".join(words[1:])):
            name, *rest = part.split()
            assert name in main.commands, (name, line)
            command = main.commands[name]
            if isinstance(command, click.Group) and not (
                command.invoke_without_command and not (rest and rest[0] in command.commands)
            ):  # its subcommand comes next, unless the group runs on its own
                assert rest and rest[0] in command.commands, (part, line)
                command = command.commands[rest.pop(0)]
            known = {opt for param in command.params for opt in param.opts}
            assert set(re.findall(r"--[a-z][a-z-]*", " ".join(rest))) <= known, (part, line)
    assert checked >= 10


def test_replay_script_runs_as_written_without_the_venv_on_path() -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/")}
    done = subprocess.run(
        [str(ROOT / "scripts" / "replay_events.py"), "--help"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0 and "--scenario" in done.stdout, done.stderr


def refused(checkout: Path, **settings: str) -> list[str]:
    """scripts/run.sh in ``checkout`` with ``settings``, expected to refuse before it starts
    anything: its output's lines (exit code 2)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STRIPE_", "OPS_", "PYTEST"))}
    done = subprocess.run(
        ["scripts/run.sh"], cwd=checkout, env={**env, **settings},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    lines = (done.stdout + done.stderr).splitlines()
    assert done.returncode == 2, lines
    assert not any("ready:" in line for line in lines), lines
    return lines


def test_a_taken_web_or_redis_port_is_refused_before_anything_starts(checkout: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        web = refused(checkout, WEB_PORT=str(port), REDIS_PORT=str(free_port()))
        redis = refused(checkout, WEB_PORT=str(free_port()), REDIS_PORT=str(port))
    assert web == [f"WEB_PORT: cannot listen on 127.0.0.1:{port}: {IN_USE}"]
    assert redis == [f"REDIS_PORT: cannot listen on 127.0.0.1:{port}: {IN_USE}"]
    assert not (checkout / "var" / "redis" / "appendonlydir").exists()  # no Redis ran there


def test_a_second_stack_sharing_var_is_refused_and_the_first_keeps_its_data(
    run_sh, checkout: Path
) -> None:
    """A second copy on other ports, same var/: its Redis would append to the first one's
    file. It stops before starting anything, naming the folder; the first runs on."""
    first, web = run_sh()
    wait_until(lambda: "ready:" in first.log.read_text(), 30, what="the ready line")
    aof = checkout / "var" / "redis" / "appendonlydir"
    files = sorted(path.name for path in aof.iterdir())
    other_web, other_redis = free_port(), free_port()
    lines = refused(checkout, WEB_PORT=str(other_web), REDIS_PORT=str(other_redis))
    holder = (checkout / "var" / "redis" / "run.pid").read_text().strip()
    assert lines == [
        f"var/redis: data folder held by scripts/run.sh pid {holder};"
        " stop that stack or use another checkout"
    ]
    assert sorted(path.name for path in aof.iterdir()) == files
    for port in (other_web, other_redis):
        assert port_in_use(f"127.0.0.1:{port}") is None  # nothing of the second listened
    assert ready(web)
    first.ctrl_c_stops_everything()


def name_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def test_the_data_folder_stays_held_while_a_process_of_the_stack_lives(
    run_sh, checkout: Path
) -> None:
    """``kill -9`` of the launcher's process group (a terminal closed hard): redis-server,
    gunicorn, the workers and the sweeper run on in their own sessions. They keep the data
    folder held, so a second copy on other ports is refused, naming the folder and the
    processes still holding it, instead of running a second Redis on the first one's
    append-only file."""
    first, _ = run_sh()
    wait_until(lambda: "ready:" in first.log.read_text(), 30, what="the ready line")
    pids = descendants(first.proc.pid)  # once orphaned they are no longer found below it
    second: Running | None = None
    try:
        os.killpg(first.proc.pid, signal.SIGKILL)
        first.proc.wait(30)
        (redis_pid,) = [pid for pid in alive(pids) if name_of(pid) == "redis-server"]
        aof = checkout / "var" / "redis" / "appendonlydir"
        files = sorted(path.name for path in aof.iterdir())
        env = {k: v for k, v in os.environ.items() if not k.startswith(("STRIPE_", "OPS_"))}
        env |= {"WEB_PORT": str(free_port()), "REDIS_PORT": str(free_port())}
        (checkout / "out.log").rename(checkout / "first.log")
        second = Running(checkout, "scripts/run.sh", env)
        wait_until(lambda: second.proc.poll() is not None, 60, what="the second stack refused")
        lines = second.log.read_text().splitlines()
        assert second.proc.returncode == 2, lines
        assert len(lines) == 1 and lines[0].startswith("var/redis: data folder held by"), lines
        assert f"{redis_pid} (redis-server)" in lines[0]
        assert sorted(path.name for path in aof.iterdir()) == files
        assert alive([redis_pid]) == [redis_pid]
    finally:
        if second is not None:
            second.kill_leftovers()
        for pid in alive(pids):
            os.kill(pid, signal.SIGKILL)
