"""The web process's own settings as gunicorn's master reads them (webhook/serving.py): a
worker class gunicorn cannot load stops it with one line naming GUNICORN_WORKER_CLASS,
not gunicorn's traceback."""

import shlex

import pytest

from webhook import serving

BASE = {"STRIPE_WEBHOOK_SECRET": "whsec_test"}


@pytest.mark.parametrize(
    "given", ["gevnt", "webhook.server.Wroker", "no_such_module.Worker", "egg:nosuch#x", "os.path"]
)
def test_a_worker_class_gunicorn_cannot_load_is_named_in_one_line(
    given: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        serving.load_or_exit({**BASE, "GUNICORN_WORKER_CLASS": given})
    assert stopped.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"invalid setting GUNICORN_WORKER_CLASS={shlex.quote(given)}: ")
    assert "Traceback" not in lines[0]


@pytest.mark.parametrize(
    "given",
    ["webhook.server.Worker", "sync", "gthread", "gevent", "gunicorn.workers.sync.SyncWorker"],
)
def test_the_worker_classes_gunicorn_loads_pass(given: str) -> None:
    server = serving.load_or_exit({**BASE, "GUNICORN_WORKER_CLASS": given})
    assert server.GUNICORN_WORKER_CLASS == given
