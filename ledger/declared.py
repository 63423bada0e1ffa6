"""Settings declared as dataclass fields (:func:`setting`: default, kind, display), read
from the environment with one line per problem, and the refusal to start that prints them.
Used by ledger/settings.py (the service's), webhook/serving.py (the web process's) and
ledgerctl/run_local.py (scripts/run.sh's). Standard library only, as setting_kinds.py.
"""

import shlex
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import Field, field
from typing import Any, NoReturn, TypeVar

from ledger.setting_kinds import Invalid, Kind

T = TypeVar("T")
EXIT_SETTINGS = 2
"""Exit code of a process that refuses to start for its settings (the CLI's usage code)."""
SHOWN_MAX = 120
"""Characters of a wrong value a problem line shows at most."""


def _as_is(text: str) -> str:
    return text


def setting(default: T, kind: Kind, show: Callable[[str], str] = _as_is) -> T:
    """A dataclass field that is a setting: its default, its kind, and how a value of it is
    shown in a problem line (``ledger.redact.mask_secret`` for secrets)."""
    return field(default=default, metadata={"kind": kind, "show": show})


class SettingsError(ValueError):
    """Settings a process must not start with: one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def shown(spec: Field[Any], text: str) -> str:
    """A value as a problem line shows it: masked as its field says, quoted as a shell would
    need it, on one line, shortened."""
    masked = spec.metadata["show"](text)
    quoted = shlex.quote(masked) if masked.isprintable() else repr(masked)
    return quoted if len(quoted) <= SHOWN_MAX else quoted[: SHOWN_MAX - 1] + "…"


def read(
    declared: Iterable[Field[Any]], given: Mapping[str, str], require: Iterable[str] = ()
) -> tuple[dict[str, object], list[str]]:
    """The values of the ``declared`` fields in ``given`` (an empty text means unset) and one
    line per problem; ``require``: names that must have a value."""
    values: dict[str, object] = {}
    problems: list[str] = []
    for spec in declared:
        text = given.get(spec.name, "")
        kind: Kind = spec.metadata["kind"]
        if not text:
            if spec.name in require:
                problems.append(f"missing setting {spec.name}: expected {kind.allowed}")
            continue
        try:
            values[spec.name] = kind.parse(text)
        except Invalid as exc:
            why = f"{exc}; " if str(exc) else ""
            line = f"invalid setting {spec.name}={shown(spec, text)}: {why}expected {kind.allowed}"
            problems.append(line)
    return values, problems


def exit_with(problems: Iterable[str]) -> NoReturn:
    """Refuse to start: one line per problem on stderr, no traceback, exit code 2."""
    sys.stderr.write("".join(f"{line}\n" for line in problems))
    sys.stderr.flush()
    raise SystemExit(EXIT_SETTINGS)
