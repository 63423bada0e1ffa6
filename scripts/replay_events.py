"""Re-send Stripe events the way Stripe would, then show what each layer saw.

    .venv/bin/python scripts/replay_events.py --scenario case-study --expect-once

The tool itself is ``ledgerctl.replay`` (also installed as ``replay-events``).
"""

from ledgerctl.replay.main import main

if __name__ == "__main__":
    main()
