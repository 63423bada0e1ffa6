"""The Lua library's shape: one prelude (and the taking-back and attempt helpers), names
declared once, every key name from keys.py."""

import re
from importlib import resources

import pytest
from redis import Redis
from rq import Queue
from rq.job import Job

from ledger import keys, replies
from ledger.scripts import (
    ATTEMPT_SCRIPTS,
    JSON_ARG_PARTS,
    TAKING_BACK,
    TAKING_BACK_SCRIPTS,
    names_given,
    source,
)

LUA = resources.files("ledger").joinpath("lua")
SCRIPTS = sorted(p.name[:-4] for p in LUA.iterdir() if p.name.endswith(".lua"))
for part in ("prelude", "attempts", *(f[:-4] for f in TAKING_BACK + JSON_ARG_PARTS)):
    SCRIPTS.remove(part)


def test_rq_key_prefixes_are_rqs_own() -> None:
    assert Job.redis_job_namespace_prefix == keys.RQ_JOB_PREFIX
    assert Queue.redis_queue_namespace_prefix == keys.RQ_QUEUE_PREFIX
    assert Queue("fulfilment", connection=Redis()).key == keys.rq_queue("fulfilment")


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_script_names_its_arguments_once_and_spells_no_key(name: str) -> None:
    own = LUA.joinpath(f"{name}.lua").read_text()
    assert names_given(source(name), "ARGV"), "ARGV named at the top"
    assert len(re.findall(r"= named\(ARGV", own)) == 1
    assert not re.search(r"\b(ARGV|KEYS)\[", own), "by name, not by position"
    assert not re.search(r"'(wl|rq):", own), "key names come from ledger/keys.py"
    assert not re.search(r"\b\d{5,}\b", own), "TTLs and caps come from ledger/keys.py"


def test_names_given_reads_the_names_in_order() -> None:
    text = "local KEY = named(KEYS, 'payment')\nlocal ARG, ARGC = named(ARGV, 'a',\n  'b')\n"
    text += "local reply = replies('verdict',\n  'state')\n"
    assert names_given(text, "KEYS") == ("payment",)
    assert names_given(text, "ARGV") == ("a", "b")
    assert names_given(text, "replies") == ("verdict", "state")


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_reply_of_several_values_is_named_as_its_struct(name: str) -> None:
    """A script that answers an array names its fields once (replies), as the struct of
    ledger.replies that reads it; one that answers one value names none."""
    own = LUA.joinpath(f"{name}.lua").read_text()
    shape = replies.SHAPES.get(name)
    assert names_given(own, "replies") == (shape.__struct_fields__ if shape else ())
    assert not re.search(r"return \{", own), "an array reply is built by reply{...}"


@pytest.mark.parametrize("name", SCRIPTS)
def test_only_the_scripts_that_take_back_get_the_taking_back_helpers(name: str) -> None:
    """As the attempt helpers: a script outside TAKING_BACK_SCRIPTS would fail on one of
    them; one inside uses at least one, in its own text or through the attempt helpers."""
    parts = "\n".join(LUA.joinpath(f).read_text() for f in TAKING_BACK)
    helpers = re.findall(r"^local (?:function )?(\w+)", parts, re.M)
    own = LUA.joinpath(f"{name}.lua").read_text()
    if name in ATTEMPT_SCRIPTS:
        own += LUA.joinpath("attempts.lua").read_text()
    used = [h for h in helpers if re.search(rf"\b{h}\b", own)]
    assert bool(used) == (name in TAKING_BACK_SCRIPTS), used


def test_each_part_uses_only_what_comes_before_it() -> None:
    """The parts are joined in order, so a helper is defined above every use of it: the
    prelude uses nothing of the taking-back parts, and each part nothing of a later one."""
    parts = ["prelude.lua", *TAKING_BACK, "attempts.lua"]
    for i, part in enumerate(parts):
        later = "\n".join(LUA.joinpath(f).read_text() for f in parts[i + 1 :])
        text = LUA.joinpath(part).read_text()
        names = re.findall(r"^local (?:function )?(\w+)", later, re.M)
        assert [n for n in names if re.search(rf"\b{n}\(", text)] == [], part


@pytest.mark.parametrize("name", SCRIPTS)
def test_only_the_attempt_scripts_get_the_attempt_helpers(name: str) -> None:
    """A script outside ATTEMPT_SCRIPTS would fail at run time on an attempt helper (a
    global Redis refuses); one inside needs at least one of them."""
    helpers = re.findall(r"^local function (\w+)", LUA.joinpath("attempts.lua").read_text(), re.M)
    own = LUA.joinpath(f"{name}.lua").read_text()
    used = [h for h in helpers if re.search(rf"\b{h}\(", own)]
    assert bool(used) == (name in ATTEMPT_SCRIPTS), used
