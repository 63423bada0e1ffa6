"""What a file setting may hold (ledger/setting_kinds.py's kinds): gunicorn's access log,
checked where gunicorn would open it, so a path it cannot write is refused with one line
naming GUNICORN_ACCESS_LOG instead of gunicorn's own "Error: '…' isn't writable".
Standard library only, as setting_kinds.py: gunicorn's master reads it before it forks.

webhook/serving.py declares GUNICORN_ACCESS_LOG (any text); gunicorn.conf.py checks it here
as well, beside the other settings (:func:`or_exit_too`).
"""

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TypeVar

from ledger.setting_fields import exit_with, read, setting
from ledger.setting_kinds import Invalid, Kind

T = TypeVar("T")
STDOUT = "-"


def log_file() -> Kind:
    """``-`` (standard output), or a file its process can append to: one that is there and
    writable, or a new one in a directory that is there and writable (gunicorn makes it)."""

    def parse(text: str) -> str:
        if text == STDOUT:
            return text
        path = Path(text)
        if path.is_dir():
            raise Invalid("it is a directory")
        if path.exists():
            if not os.access(path, os.W_OK):
                raise Invalid("the file is not writable")
            return text
        folder = path.absolute().parent
        if not folder.is_dir():
            raise Invalid("its directory does not exist")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise Invalid("its directory is not writable")
        return text

    return Kind(parse, f"{STDOUT} (standard output) or a file in a writable directory")


@dataclass(frozen=True)
class AccessLog:
    GUNICORN_ACCESS_LOG: str = setting("", log_file())
    """gunicorn's access log, as gunicorn will open it."""


def access_log_problems(env: Mapping[str, str]) -> list[str]:
    """One line when GUNICORN_ACCESS_LOG in ``env`` is a file gunicorn cannot write."""
    return read(fields(AccessLog), env)[1]


def or_exit_too(problems: list[str], load: Callable[[], T]) -> T:
    """What ``load`` (a process's ``load_or_exit``) returns, or refuse to start with its
    lines and then ``problems``: each wrong setting named in the one refusal."""
    try:
        found = load()
    except SystemExit:
        if problems:
            exit_with(problems)
        raise
    if problems:
        exit_with(problems)
    return found
