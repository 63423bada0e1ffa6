"""Numbers in settings: ASCII digits only (``str.isdigit`` and ``float`` also take
superscripts and other scripts' digits, which ``int`` then refuses with a traceback), and
every duration bounded by what Redis, Lua and the process timers accept. A wrong one is
one line naming the setting, never an exception."""

from dataclasses import Field, fields
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger import limits
from ledger import setting_kinds as kinds
from ledger.setting_kinds import CEILINGS
from ledger.settings import Settings
from ledgerctl.run_local import Local
from tests.unit.test_settings import problems
from webhook.serving import Server

ALL = [(cls, f) for cls in (Settings, Server, Local) for f in fields(cls)]
NUMERIC = [(cls, f) for cls, f in ALL if f.type in (int, float, int | None)]
DURATIONS = [
    (cls, f, unit)
    for cls, f in NUMERIC
    for unit in CEILINGS
    if f" of {unit}," in f.metadata["kind"].allowed and "at most" in f.metadata["kind"].allowed
]
"""The durations without a tighter bound of their own (REDIS_SOCKET_TIMEOUT's 300 s)."""
# Where a number sits inside a setting that is not itself a number.
TEMPLATES = {
    "REDIS_SENTINELS": ("127.0.0.1:{}", "10.0.0.1:26379,s-b:{}"),
    "REDIS_URL": ("redis://127.0.0.1:{}/0", "redis://127.0.0.1:6389/{}", "unix:///r.sock?db={}"),
}

non_ascii_digits = st.text(
    st.characters(categories=("Nd", "No", "Nl"), min_codepoint=128), min_size=1, max_size=3
)
ascii_digits = st.text("0123456789", max_size=3)


def one_line_naming(cls: type, name: str, text: str) -> str:
    lines = problems(cls, {name: text})
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"invalid setting {name}="), lines[0]
    return lines[0]


@pytest.mark.parametrize(("cls", "spec"), NUMERIC, ids=[f.name for _, f in NUMERIC])
@given(before=ascii_digits, digits=non_ascii_digits, after=ascii_digits)
def test_a_number_takes_only_ascii_digits(
    cls: type, spec: Field[Any], before: str, digits: str, after: str
) -> None:
    one_line_naming(cls, spec.name, before + digits + after)


@pytest.mark.parametrize(
    ("name", "template"),
    [(n, t) for n, ts in TEMPLATES.items() for t in ts],
    ids=[t for ts in TEMPLATES.values() for t in ts],
)
@given(before=ascii_digits, digits=non_ascii_digits, after=ascii_digits)
def test_a_port_or_database_takes_only_ascii_digits(
    name: str, template: str, before: str, digits: str, after: str
) -> None:
    one_line_naming(Settings, name, template.format(before + digits + after))


@pytest.mark.parametrize("text", ["1_0", "inf", "-inf", "nan", "0x10", "1e", ".", "+", "١.٥", "2²"])
def test_what_float_would_take_but_is_no_decimal_number(text: str) -> None:
    one_line_naming(Settings, "FULFILMENT_TIMEOUT", text)
    one_line_naming(Settings, "EVENT_RETENTION_DAYS", text)


def test_the_reported_sentinel_address_is_one_line() -> None:
    line = one_line_naming(Settings, "REDIS_SENTINELS", "127.0.0.1:²")
    assert "is not host:port" in line


@pytest.mark.parametrize(("cls", "spec", "unit"), DURATIONS, ids=[f.name for _, f, _ in DURATIONS])
def test_every_duration_has_a_ceiling_redis_accepts(cls: type, spec: Field[Any], unit: str) -> None:
    most, words = CEILINGS[unit]
    kind = spec.metadata["kind"]
    assert kind.parse(str(most)) == most
    line = one_line_naming(cls, spec.name, str(most + 1))
    assert f"at most {most} ({words})" in line


def test_the_ceilings_fit_redis_lua_and_the_timers() -> None:
    """EXPIRE takes seconds up to (2**63 - 1) / 1000 minus now; Lua numbers are exact up to
    2**53; SIGALRM (RQ's job timeout) takes a C int of seconds."""
    most_ms = limits.MAX_DURATION_DAYS * 86400 * 1000
    assert most_ms + 10**13 < 2**53  # ms since the epoch until past the year 2286
    job_timeout = 2 * limits.MAX_DURATION_SECONDS + limits.JOB_TIMEOUT_MARGIN_SECONDS
    assert job_timeout < 2**31
    assert limits.MAX_DURATION_SECONDS < limits.MAX_DURATION_DAYS * 86400
    assert {unit for _, _, unit in DURATIONS} == set(CEILINGS)
    assert "EVENT_RETENTION_DAYS" in {f.name for _, f, _ in DURATIONS}


HUGE = "9" * 5000
"""More digits than Python converts at all (4,300): int() raises a ValueError of its own."""


@pytest.mark.parametrize(("cls", "spec"), NUMERIC, ids=[f.name for _, f in NUMERIC])
@pytest.mark.parametrize("text", [HUGE, "-" + HUGE, "0" * 5000 + "1"])
def test_a_number_of_thousands_of_digits_is_one_line(
    cls: type, spec: Field[Any], text: str
) -> None:
    if text.startswith("0"):  # leading zeros are no value: read as 1 is
        assert len(problems(cls, {spec.name: text})) == len(problems(cls, {spec.name: "1"}))
    else:
        one_line_naming(cls, spec.name, text)


@pytest.mark.parametrize(
    ("name", "template"),
    [(n, t) for n, ts in TEMPLATES.items() for t in ts] + [("REDIS_URL", "redis://h:1/0?db={}")],
    ids=[t for ts in TEMPLATES.values() for t in ts] + ["redis://h:1/0?db={}"],
)
def test_a_port_or_database_of_thousands_of_digits_is_one_line(name: str, template: str) -> None:
    one_line_naming(Settings, name, template.format(HUGE))


WHOLE = [(cls, f) for cls, f in NUMERIC if "a whole number" in f.metadata["kind"].allowed]


@pytest.mark.parametrize(("cls", "spec"), WHOLE, ids=[f.name for _, f in WHOLE])
def test_every_whole_number_has_a_ceiling_lua_accepts(cls: type, spec: Field[Any]) -> None:
    """The Lua scripts read numbers as doubles, exact up to 2**53: STRIPE_API_MAX_RATE=10**400
    passed the check and was then refused by stripe_rate.lua on every request."""
    one_line_naming(cls, spec.name, str(2**53))
    one_line_naming(cls, spec.name, str(10**400))


def test_a_whole_number_kind_without_a_ceiling_cannot_be_declared() -> None:
    with pytest.raises(TypeError):
        kinds.whole(1, None, "per second")
    assert kinds.whole(1, None, "days").parse(str(limits.MAX_DURATION_DAYS)) > 0
