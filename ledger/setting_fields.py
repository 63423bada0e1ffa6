"""Settings declared as dataclass fields: :func:`setting` (default, kind, masking) with the
field's docstring under it; read from the environment with one line per problem, the
refusal to start that prints them, and the Markdown table of docs/CONFIGURATION.md, all
from that one declaration. Used by ledger/setting_list.py (the service's), webhook/serving.py
(the web process's) and ledgerctl/run_local.py (scripts/run.sh's). Standard library only,
as setting_kinds.py.
"""

import ast
import inspect
import shlex
import sys
import textwrap
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import MISSING, Field, field, fields
from typing import Any, NoReturn, TypeVar

from ledger.setting_kinds import Invalid, Kind

T = TypeVar("T")
EXIT_SETTINGS = 2
"""Exit code of a process that refuses to start for its settings (the CLI's usage code)."""
SHOWN_MAX = 120
"""Characters of a wrong value a problem line shows at most."""
SLIP_MIN = 6
"""Shortest name a one-letter slip is looked for in: ``PORT0`` is no slip of PORT."""


def _as_is(text: str) -> str:
    return text


def setting(default: T, kind: Kind, mask: Callable[[str], str] = _as_is) -> T:
    """A dataclass field that is a setting: its default (a value of its kind), its kind, and
    how its text is masked in a problem line (``ledger.redact.mask_secret`` for secrets)."""
    return field(default=default, metadata={"kind": kind, "mask": mask})


def kind_of(spec: Field[Any]) -> Kind:
    kind: Kind = spec.metadata["kind"]
    return kind


class SettingsError(ValueError):
    """Settings a process must not start with: one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def masked(spec: Field[Any], text: str) -> str:
    """A value as a problem line shows it: masked as its field says, quoted as a shell would
    need it, on one line, shortened."""
    hidden = spec.metadata["mask"](text)
    quoted = shlex.quote(hidden) if hidden.isprintable() else repr(hidden)
    return quoted if len(quoted) <= SHOWN_MAX else quoted[: SHOWN_MAX - 1] + "…"


def invalid(spec: Field[Any], text: str, why: str) -> str:
    """The problem line of a setting whose value ``text`` is wrong ``why``."""
    return f"invalid setting {spec.name}={masked(spec, text)}: {why}"


def read(
    declared: Iterable[Field[Any]], given: Mapping[str, str], require: Iterable[str] = ()
) -> tuple[dict[str, object], list[str]]:
    """The values of the ``declared`` fields in ``given`` (an empty text means unset) and one
    line per problem; ``require``: names that must have a value."""
    values: dict[str, object] = {}
    problems: list[str] = []
    for spec in declared:
        text, kind = given.get(spec.name, ""), kind_of(spec)
        if not text:
            if spec.name in require:
                problems.append(f"missing setting {spec.name}: expected {kind.allowed}")
            continue
        try:
            values[spec.name] = kind.parse(text)
        except Invalid as exc:
            why = f"{exc}; " if str(exc) else ""
            problems.append(invalid(spec, text, f"{why}expected {kind.allowed}"))
    return values, problems


def meant(name: str, known: Collection[str]) -> str | None:
    """The setting a variable that is none was meant to be: the same name in other case, or
    one letter added, dropped or changed, or two neighbouring ones swapped (a name of
    SLIP_MIN letters or more); else None. A short all-lowercase name is another
    convention's (``host``, ``port``), never taken for a setting's."""
    if name in known or (name.islower() and len(name) < SLIP_MIN):
        return None
    upper = name.upper()
    for setting in sorted(known):
        if upper == setting or (
            min(len(upper), len(setting)) >= SLIP_MIN and _one_slip(upper, setting)
        ):
            return setting
    return None


def _one_slip(a: str, b: str) -> bool:
    """Whether ``a`` is ``b`` with one letter added, dropped or changed, or two neighbouring
    letters swapped."""
    if abs(len(a) - len(b)) > 1 or a == b:
        return False
    head = next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )
    if len(a) != len(b):
        longer, shorter = (a, b) if len(a) > len(b) else (b, a)
        return longer[head + 1 :] == shorter[head:]
    if a[head + 1 :] == b[head + 1 :]:
        return True
    swapped = head + 1 < len(a) and (a[head], a[head + 1]) == (b[head + 1], b[head])
    return swapped and a[head + 2 :] == b[head + 2 :]


def misspelt(names: Iterable[str], known: Collection[str]) -> list[str]:
    """One problem line per variable in ``names`` that is no setting but a slip of one: its
    name only, never its value (the value of a misspelt secret is a secret)."""
    lines = []
    for name in sorted(names):
        setting = meant(name, known)
        if setting:
            shown = name if name.isprintable() and " " not in name else repr(name)
            lines.append(f"unknown setting {shown}: did you mean {setting}?")
    return lines


def field_named(cls: type, name: str) -> Field[Any]:
    return next(f for f in fields(cls) if f.name == name)


def spelled(settings: object, name: str) -> str:
    """Setting ``name`` of ``settings`` as the environment spells it (``host:port,...``)."""
    return kind_of(field_named(type(settings), name)).spell(getattr(settings, name))


def load(
    cls: type[T],
    given: Mapping[str, str],
    require: Iterable[str] = (),
    rules: Callable[[T, set[str]], list[tuple[str, str]]] | None = None,
) -> T:
    """``cls`` (a dataclass of settings) from ``given``: each setting checked, then the
    ``rules`` between them, which skip a rule whose settings include a ``failed`` one;
    raises SettingsError with every problem."""
    require = tuple(require)
    values, problems = read(fields(cls), given, require)  # type: ignore[arg-type]
    found = cls(**values)
    failed = {name for name, text in given.items() if text and name not in values}
    for name, expected in rules(found, failed | set(require) - set(values)) if rules else ():
        text = given.get(name) or spelled(found, name)
        problems.append(invalid(field_named(cls, name), text, expected))
    if problems:
        raise SettingsError(problems)
    return found


def exit_with(problems: Iterable[str]) -> NoReturn:
    """Refuse to start: one line per problem on stderr, no traceback, exit code 2."""
    sys.stderr.write("".join(f"{line}\n" for line in problems))
    sys.stderr.flush()
    raise SystemExit(EXIT_SETTINGS)


def or_exit(*loads: Callable[[], Any]) -> list[Any]:
    """What each of ``loads`` returns, or refuse to start with one line per problem of any
    of them (a process's own settings and the service's: every entry point)."""
    done, problems = [], []
    for load_one in loads:
        try:
            done.append(load_one())
        except SettingsError as exc:
            problems += exc.problems
    if problems:
        exit_with(problems)
    return done


def refuse(settings: object, name: str, why: str) -> NoReturn:
    """Refuse to start for a setting that parsed but cannot be used (the worker's action)."""
    exit_with([invalid(field_named(type(settings), name), spelled(settings, name), why)])


def docs(cls: type) -> dict[str, str]:
    """The docstring under each field of ``cls``, on one line (Python keeps no attribute
    docstrings, so they are read from the source as Sphinx does)."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0]
    assert isinstance(body, ast.ClassDef)
    found = {}
    for node, after in zip(body.body, body.body[1:], strict=False):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                found[node.target.id] = " ".join(str(after.value.value).replace("``", "`").split())
    return found


def markdown(*declared: type) -> str:
    """The settings of the ``declared`` dataclasses as a Markdown table: name, default, what
    is allowed and the field's docstring."""
    rows = ["| setting | default | allowed | what it does |", "|---|---|---|---|"]
    for cls in declared:
        words = docs(cls)
        for spec in fields(cls):
            given = spec.default not in (MISSING, None)
            text = kind_of(spec).spell(spec.default) if given else ""
            cells = [f"`{spec.name}`", f"`{text}`" if text else "unset"]
            cells += [kind_of(spec).allowed, words.get(spec.name, "")]
            rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(rows) + "\n"
