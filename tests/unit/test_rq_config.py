"""workers/rq_config.py, what ``rq worker -c workers.rq_config`` loads in the worker's own
process before it forks."""

import os
import subprocess
import sys
from pathlib import Path

from tests.support.processes import ROOT

LOADED = "import sys, workers.rq_config; print('workers.jobs' in sys.modules, flush=True)"


def test_the_job_module_is_loaded_before_a_work_horse_is_forked(tmp_path: Path) -> None:
    """A forking Worker's work-horses inherit what the worker imported; left to them, each
    job imported its module again (half a forking worker's CPU per job)."""
    env = {**os.environ, "FULFILMENT_ACTION": f"sqlite:///{tmp_path / 'downstream.sqlite3'}"}
    done = subprocess.run(
        [sys.executable, "-c", LOADED], cwd=ROOT, env=env, capture_output=True, timeout=60
    )
    assert (done.returncode, done.stdout) == (0, b"True\n"), done.stderr
