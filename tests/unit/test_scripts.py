"""The Lua library's shape: one prelude, names declared once, every key name from keys.py."""

import re
from importlib import resources

import pytest
from redis import Redis
from rq import Queue
from rq.job import Job

from ledger import keys
from ledger.scripts import declared, source

LUA = resources.files("ledger").joinpath("lua")
SCRIPTS = sorted(p.name[:-4] for p in LUA.iterdir() if p.name.endswith(".lua"))
SCRIPTS.remove("prelude")


def test_rq_key_prefixes_are_rqs_own() -> None:
    assert Job.redis_job_namespace_prefix == keys.RQ_JOB_PREFIX
    assert Queue.redis_queue_namespace_prefix == keys.RQ_QUEUE_PREFIX
    assert Queue("fulfilment", connection=Redis()).key == keys.rq_queue("fulfilment")


@pytest.mark.parametrize("name", SCRIPTS)
def test_a_script_names_its_arguments_once_and_spells_no_key(name: str) -> None:
    own = LUA.joinpath(f"{name}.lua").read_text()
    assert declared(source(name), "ARGV"), "ARGV named at the top"
    assert len(re.findall(r"= named\(ARGV", own)) == 1
    assert not re.search(r"\b(ARGV|KEYS)\[", own), "by name, not by position"
    assert not re.search(r"'(wl|rq):", own), "key names come from ledger/keys.py"
    assert not re.search(r"\b\d{5,}\b", own), "TTLs and caps come from ledger/keys.py"


def test_declared_reads_the_names_in_order() -> None:
    text = "local KEY = named(KEYS, 'payment')\nlocal ARG, ARGC = named(ARGV, 'a',\n  'b')\n"
    assert declared(text, "KEYS") == ("payment",)
    assert declared(text, "ARGV") == ("a", "b")
