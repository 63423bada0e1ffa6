#!/usr/bin/env python3
"""Re-send Stripe events the way Stripe would, then show what each layer saw.

    scripts/replay_events.py --scenario case-study --expect-once

The tool itself is ``ledgerctl.replay`` (also installed as ``replay-events``). Any Python
where the project is installed runs it (a deploy's venv, a container); any other python3
re-runs this script with the checkout's .venv (scripts/bootstrap.sh makes it).
"""

import os
import sys
from pathlib import Path

VENV = Path(__file__).resolve().parents[1] / ".venv"

try:
    from ledgerctl.replay.main import main
except ImportError:
    python = VENV / "bin" / "python"
    if Path(sys.prefix).resolve() == VENV.resolve():
        raise  # the .venv itself lacks it: nothing else to try
    if not python.exists():
        sys.exit(
            f"the project is not installed in {sys.executable} and {python} is missing:"
            " run scripts/bootstrap.sh first (or install the project)"
        )
    os.execv(python, [str(python), __file__, *sys.argv[1:]])

if __name__ == "__main__":
    main()
