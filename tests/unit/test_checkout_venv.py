"""The checkout's scripts run from any python3: re-run with the checkout's .venv, or one line
saying how to make it."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)  # the .venv's base


def help_of(script: Path) -> subprocess.CompletedProcess[str]:
    """``script --help`` run by the .venv's base python, without user site or environment."""
    return subprocess.run(
        [BASE_PYTHON, "-sE", str(script), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("script", ["replay_events.py", "stripe_api_standin.py"])
def test_a_python_without_the_project_re_runs_the_script_with_the_venv(script: str) -> None:
    if sys.prefix == sys.base_prefix:
        pytest.skip("this python is not a venv's: no other python to run the script from")
    done = help_of(ROOT / "scripts" / script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:")


@pytest.mark.parametrize("script", ["replay_events.py", "stripe_api_standin.py"])
def test_a_checkout_without_a_venv_says_how_to_make_one(tmp_path: Path, script: str) -> None:
    (tmp_path / "scripts").mkdir()
    for name in (script, "checkout_venv.py"):
        shutil.copy(ROOT / "scripts" / name, tmp_path / "scripts" / name)
    done = help_of(tmp_path / "scripts" / script)
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert f"{tmp_path}/.venv/bin/python is missing: run scripts/bootstrap.sh first" in line
