"""prove-action's worker wraps the configured action (ledgerctl/prove_worker.py) without
changing which paths the worker takes with it: a built-in action's settlement, its abort at
the deadline and its downstream's name are the action's own."""

from pathlib import Path

from ledgerctl.prove_worker import Faulty
from workers.actions import HttpAction, downstream_of, settler
from workers.sqlite_action import SqliteAction


def wrapped(action: object, tmp_path: Path) -> Faulty:
    env = {"PROVE_CALLS": str(tmp_path / "calls"), "PROVE_COUNTS": str(tmp_path / "counts")}
    return Faulty(action, env, 1.0, "fulfil")  # type: ignore[arg-type]


def test_a_built_in_action_wrapped_still_settles_and_names_its_downstream(
    tmp_path: Path,
) -> None:
    action = SqliteAction(str(tmp_path / "d.sqlite3"))
    faulty = wrapped(action, tmp_path)
    assert settler(faulty) == action.settle
    assert downstream_of(faulty) == downstream_of(action) != ""


def test_an_action_that_cannot_settle_wrapped_cannot_either(tmp_path: Path) -> None:
    action = HttpAction("http://127.0.0.1:9/fulfil", 1.0, replay_safe=True)
    faulty = wrapped(action, tmp_path)
    assert settler(faulty) is None
    assert faulty.abort == action.abort  # its own: cuts its connection at the deadline
    assert downstream_of(faulty) == downstream_of(action) != ""
