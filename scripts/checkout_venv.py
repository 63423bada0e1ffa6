"""Re-run a checkout's script with the checkout's .venv when this python3 lacks the project.

Imported by the scripts beside it before anything of the project: Python puts a script's own
folder first on ``sys.path``, so any python3 finds this module.
"""

import os
import sys
from pathlib import Path

VENV = Path(__file__).resolve().parents[1] / ".venv"


def rerun_with_venv(script: str, missing: str) -> None:
    """Replace this process by ``script`` under the .venv's python, with the same arguments;
    exits with ``missing`` if there is no .venv, re-raises if this already is the .venv's."""
    python = VENV / "bin" / "python"
    if Path(sys.prefix).resolve() == VENV.resolve():
        raise  # the .venv itself lacks it: nothing else to try
    if not python.exists():
        sys.exit(missing)
    os.execv(python, [str(python), script, *sys.argv[1:]])
