"""Record deliveries straight through the real ledger (``Ledger.record_delivery``), as the
view does after verification, and fill a ledger fast with the real script server-side."""

from collections.abc import Callable, Mapping
from typing import Any

import orjson
from redis import Redis

from ledger.deliveries import Delivery, Ledger, new_request_id
from ledger.events import classify
from ledger.settings import load as load_settings
from ledger.stored import text


def ledger_for(env: Mapping[str, str]) -> Ledger:
    settings = load_settings(environ=env)
    return Ledger(Redis.from_url(env["REDIS_URL"], socket_timeout=120), settings)


def delivery(ledger: Ledger, body: bytes, request_id: str | None = None) -> Delivery:
    event = orjson.loads(body)
    return Delivery(
        event=event,
        body=body,
        classified=classify(event, ledger.settings.policy),
        secret_label="bench",
        source="stripe",
        request_id=request_id or new_request_id(),
    )


def recorder(env: Mapping[str, str]) -> Callable[[bytes], Any]:
    """A function that records one event body through the real ledger."""
    ledger = ledger_for(env)
    return lambda body: ledger.record_delivery(delivery(ledger, body))


FILL = """
local function record(KEYS, ARGV)
%s
end
local nk, na = tonumber(ARGV[1]), tonumber(ARGV[2])
local tid, tpk, treq = ARGV[3], ARGV[4], ARGV[5]
local first, count, per_payment = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local plan_k, plan_a = cjson.decode(ARGV[9]), cjson.decode(ARGV[10])
local tk, ta = {}, {}
for i = 1, nk do tk[i] = ARGV[10 + i] end
for i = 1, na do ta[i] = ARGV[10 + nk + i] end
local function pad(prefix, n, len)
  local digits = tostring(n)
  return prefix .. string.rep('0', len - #prefix - #digits) .. digits
end
local function fill(t, plan, id, pk, req)
  local out = {}
  for i = 1, #t do out[i] = t[i] end
  for _, step in ipairs(plan) do
    local i, what = step[1], step[2]
    local from, to = tid, id
    if what == 'pk' then from, to = tpk, pk elseif what == 'req' then from, to = treq, req end
    local s, e = string.find(out[i], from, 1, true)
    while s do
      out[i] = string.sub(out[i], 1, s - 1) .. to .. string.sub(out[i], e + 1)
      s, e = string.find(out[i], from, s + #to, true)
    end
  end
  return out
end
for n = first, first + count - 1 do
  local id = pad('evt_fill', n, #tid)
  local pk = pad('pi_fill', math.floor(n / per_payment), #tpk)
  local req = pad('fill', n, #treq)
  record(fill(tk, plan_k, id, pk, req), fill(ta, plan_a, id, pk, req))
end
return count
"""


class Filler:
    """Puts ``n`` events into a ledger with the real ``record_delivery.lua``, server-side.

    One realistic non-paid event (``payment_intent.created``, ~2.3 KB) is recorded once
    through ``Ledger.record_delivery`` with the script call captured; its keys and
    arguments become a template in which the event id, payment key and request id are
    replaced per filler event (3 events per payment). The real script text runs in a
    loop inside one EVAL per chunk, so a million events take tens of seconds instead of
    a million round trips. Every filler event is a new event of the real schema.
    """

    def __init__(self, env: Mapping[str, str], template_body: bytes) -> None:
        self.ledger = ledger_for(env)
        d = delivery(self.ledger, template_body, request_id="f" * 24)
        script = self.ledger.record_script
        script_keys, args = script.positional(*self.ledger.delivery_call(d, job_id=""))
        self.keys = [text(k) for k in script_keys]
        self.args = [a if isinstance(a, bytes) else str(a) for a in args]
        self.ids = {"id": d.event["id"], "pk": d.classified.payment_key or "", "req": "f" * 24}
        if not self.ids["pk"]:
            raise RuntimeError("the filler template event needs a payment key")
        self.plan_k = self._plan(self.keys)
        self.plan_a = self._plan(self.args)
        self.sha = self.ledger.redis.script_load(FILL % script.registered.script)

    def _plan(self, values: list[Any]) -> list[list[Any]]:
        plan = []
        for i, v in enumerate(values, start=1):
            if isinstance(v, str):
                for what, token in self.ids.items():
                    if token and token in v:
                        plan.append([i, what])
        return plan

    def fill(self, first: int, count: int, chunk: int = 5000) -> None:
        r = self.ledger.redis
        head = [
            len(self.keys),
            len(self.args),
            self.ids["id"],
            self.ids["pk"],
            self.ids["req"],
        ]
        plan = [orjson.dumps(self.plan_k), orjson.dumps(self.plan_a)]
        for start in range(first, first + count, chunk):
            n = min(chunk, first + count - start)
            r.evalsha(self.sha, 0, *head, start, n, 3, *plan, *self.keys, *self.args)
