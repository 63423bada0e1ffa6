"""What scripts/run.sh starts and guards, without starting it: the processes of each
topology, their downstream files, a data folder held by one stack at a time, and whose
server answers /readyz."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ledgerctl import local_guard
from ledgerctl.run_local import local_env, processes
from tests.support.processes import ROOT, RedisServer

DEV = {"DEV_WEBHOOK_SECRET": "whsec_local_0123456789abcdef", "DEV_OPS_TOKEN": "token"}
SERVICE = ("web", "worker", "sweeper")


def test_ha_runs_the_procfile_service_lines_beside_procfile_ha_nodes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)
    single, replicated = processes(False), processes(True)
    assert set(single) == {"redis", *SERVICE}
    nodes = {f"{kind}{n}" for kind in ("redis", "sentinel") for n in (1, 2, 3)}
    assert set(replicated) == nodes | set(SERVICE)
    assert {name: replicated[name] for name in SERVICE} == {n: single[n] for n in SERVICE}
    assert "fulfilment-worker" in single["worker"]  # Sentinel-aware on either topology


def test_single_node_and_ha_keep_separate_downstream_files(tmp_path: Path) -> None:
    single = local_env({}, DEV, tmp_path)["FULFILMENT_ACTION"]
    replicated = local_env({}, DEV, tmp_path, tmp_path / "var" / "ha")["FULFILMENT_ACTION"]
    assert single == f"sqlite:///{tmp_path}/var/downstream.sqlite3"
    assert replicated == f"sqlite:///{tmp_path}/var/ha/downstream.sqlite3"


def test_a_data_folder_is_held_by_one_stack_at_a_time(tmp_path: Path) -> None:
    folder = tmp_path / "redis"
    held = len(local_guard._held)
    try:
        assert local_guard.hold(folder) is None
        assert (folder / local_guard.OWNER_FILE).read_text() == f"{os.getpid()}\n"
        # A second hold opens the folder again: flock refuses it as it would another process.
        assert local_guard.hold(folder) == (
            f"{folder}: data folder held by scripts/run.sh pid {os.getpid()};"
            " stop that stack or use another checkout"
        )
    finally:
        while len(local_guard._held) > held:
            os.close(local_guard._held.pop())
    assert local_guard.hold(folder) is None  # released: free again
    os.close(local_guard._held.pop())


def test_only_a_descendant_of_the_launcher_is_its_own_server() -> None:
    # A child of ours, not our own parent: a detached run's parent is init (pid 1).
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert local_guard.descends_from(child.pid, os.getpid())
        assert local_guard.descends_from(os.getpid(), os.getpid())
        assert not local_guard.descends_from(os.getpid(), child.pid)
        assert not local_guard.descends_from(0, os.getpid())  # /readyz without a pid
    finally:
        child.kill()
        child.wait()


def test_a_folder_a_redis_server_works_in_is_refused_though_no_launcher_holds_it(
    tmp_path: Path,
) -> None:
    """The Procfile's `redis` line run by hand holds no lock: a second scripts/run.sh on
    other ports started its own Redis on the same folder, which wrote into the first one's
    append-only file (ops review). A redis-server working in the folder (its --dir) refuses
    it, naming that process, and so does a folder holding it; a shell only cd'd there does
    not."""
    folder, shell_only = tmp_path / "redis", tmp_path / "other"
    shell_only.mkdir()
    # lives until its stdin closes (below): no time of its own to outlast the test
    shell = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        cwd=shell_only,
        stdin=subprocess.PIPE,
    )
    server = RedisServer(folder).start()
    try:
        said = local_guard.hold(folder)
        assert said is not None and f"in use by {server.pid} (redis-server)" in said
        assert said.endswith("not started by scripts/run.sh; stop it or use another checkout")
        assert local_guard.free(folder) == said
        # a folder holding it (--ha's var/ha holds var/ha/redis-N) is refused the same way
        assert local_guard.started_by_hand(tmp_path) == said.replace(str(folder), str(tmp_path))
        assert local_guard.started_by_hand(shell_only) is None  # a process only cd'd there
    finally:
        server.stop()
        shell.communicate()  # closes its stdin: it ends
    held = len(local_guard._held)
    assert local_guard.hold(folder) is None and len(local_guard._held) == held + 1
    os.close(local_guard._held.pop())
