#!/usr/bin/env python3
"""Re-send Stripe events the way Stripe would, then show what each layer saw.

    scripts/replay_events.py --scenario case-study --expect-once

The tool itself is ``ledgerctl.replay`` (also installed as ``replay-events``). Any Python
where the project is installed runs it (a deploy's venv, a container); any other python3
re-runs this script with the checkout's .venv (scripts/bootstrap.sh makes it).
"""

import sys

from checkout_venv import VENV, rerun_with_venv

try:
    from ledgerctl.replay.main import main
except ImportError:
    rerun_with_venv(
        __file__,
        f"the project is not installed in {sys.executable} and {VENV}/bin/python is missing:"
        " run scripts/bootstrap.sh first (or install the project)",
    )

if __name__ == "__main__":
    main()
