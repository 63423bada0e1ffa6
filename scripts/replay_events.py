#!/usr/bin/env python3
"""Re-send Stripe events the way Stripe would, then show what each layer saw.

    scripts/replay_events.py --scenario case-study --expect-once

The tool itself is ``ledgerctl.replay`` (also installed as ``.venv/bin/replay-events``).
Run by any python3, this script re-runs itself with the project's .venv (scripts/bootstrap.sh
makes it), where the tool and its dependencies are installed.
"""

import os
import sys
from pathlib import Path

VENV = Path(__file__).resolve().parents[1] / ".venv"
if Path(sys.prefix).resolve() != VENV.resolve():
    python = VENV / "bin" / "python"
    if not python.exists():
        sys.exit(f"{python} is missing: run scripts/bootstrap.sh first")
    os.execv(python, [str(python), __file__, *sys.argv[1:]])

from ledgerctl.replay.main import main  # noqa: E402 (after choosing the interpreter)

if __name__ == "__main__":
    main()
