"""GUNICORN_ACCESS_LOG, checked as gunicorn will open it (ledger/setting_files.py): a file it
cannot write is one line naming the setting, with the others' lines, never gunicorn's own
"Error: '…' isn't writable"."""

import os
from pathlib import Path

import pytest

from ledger.setting_fields import SettingsError
from ledger.setting_files import access_log_problems, or_exit_too


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ("/nonexistent/dir/a.log", "its directory does not exist"),
        ("{tmp}", "it is a directory"),
        ("{tmp}/file/a.log", "its directory does not exist"),
    ],
)
def test_an_access_log_gunicorn_cannot_write_is_one_line_naming_it(
    tmp_path: Path, given: str, why: str
) -> None:
    (tmp_path / "file").write_text("")
    text = given.format(tmp=tmp_path)
    assert access_log_problems({"GUNICORN_ACCESS_LOG": text}) == [
        f"invalid setting GUNICORN_ACCESS_LOG={text}: {why}; expected - (standard output) or a"
        " file in a writable directory"
    ]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_an_access_log_in_a_directory_it_cannot_write_is_named(tmp_path: Path) -> None:
    tmp_path.chmod(0o500)
    try:
        lines = access_log_problems({"GUNICORN_ACCESS_LOG": str(tmp_path / "a.log")})
    finally:
        tmp_path.chmod(0o700)
    assert len(lines) == 1 and "its directory is not writable" in lines[0]


@pytest.mark.parametrize("given", ["", "-", "{tmp}/new.log", "{tmp}/old.log", "/dev/null"])
def test_stdout_and_a_writable_file_pass(tmp_path: Path, given: str) -> None:
    (tmp_path / "old.log").write_text("")
    assert access_log_problems({"GUNICORN_ACCESS_LOG": given.format(tmp=tmp_path)}) == []
    assert not (tmp_path / "new.log").exists()  # checked, not made


def test_the_access_log_is_named_beside_the_other_settings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def others() -> None:
        from ledger.setting_fields import or_exit

        or_exit(lambda: (_ for _ in ()).throw(SettingsError(["invalid setting MAX_ATTEMPTS=0"])))

    with pytest.raises(SystemExit) as stopped:
        or_exit_too(["invalid setting GUNICORN_ACCESS_LOG=/x/a.log"], others)
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "invalid setting MAX_ATTEMPTS=0",
        "invalid setting GUNICORN_ACCESS_LOG=/x/a.log",
    ]
    with pytest.raises(SystemExit):
        or_exit_too(["invalid setting GUNICORN_ACCESS_LOG=/x/a.log"], lambda: "loaded")
    assert or_exit_too([], lambda: "loaded") == "loaded"
