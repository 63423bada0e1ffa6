"""The Lua library's shape: one prelude (and the attempt helpers), names declared once, every
key name from keys.py."""

import re
from importlib import resources

import pytest
from redis import Redis
from rq import Queue
from rq.job import Job

from ledger import keys, replies
from ledger.scripts import ATTEMPT_SCRIPTS, names_given, source

LUA = resources.files("ledger").joinpath("lua")
SCRIPTS = sorted(p.name[:-4] for p in LUA.iterdir() if p.name.endswith(".lua"))
SCRIPTS.remove("prelude")
SCRIPTS.remove("attempts")


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
def test_only_the_attempt_scripts_get_the_attempt_helpers(name: str) -> None:
    """A script outside ATTEMPT_SCRIPTS would fail at run time on an attempt helper (a
    global Redis refuses); one inside needs at least one of them."""
    helpers = re.findall(r"^local function (\w+)", LUA.joinpath("attempts.lua").read_text(), re.M)
    own = LUA.joinpath(f"{name}.lua").read_text()
    used = [h for h in helpers if re.search(rf"\b{h}\(", own)]
    assert bool(used) == (name in ATTEMPT_SCRIPTS), used
