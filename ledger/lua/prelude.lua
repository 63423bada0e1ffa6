-- Shared by every ledger script (prepended when the script is loaded; scripts cannot call
-- each other). Each script checks its arguments before its first write: Redis does not roll
-- back a script that fails half-way, so a runtime error after a write would leave it partial.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The commands an RQ enqueue is captured as, with the argument counts each may have
-- (name included): anything else could fail half-way through a script, so it is refused.
local CAPTURABLE = {
  SADD = function(n) return n >= 3 end,
  RPUSH = function(n) return n >= 3 end,
  LPUSH = function(n) return n >= 3 end,
  HSET = function(n) return n >= 4 and n % 2 == 0 end,
}

-- Whether ARGV[first..] is a well-formed list of captured commands: (count, arg1..argcount)*.
local function commands_ok(first)
  local i = first
  while i <= #ARGV do
    local count = tonumber(ARGV[i])
    if not count or count < 1 or count ~= math.floor(count) or i + count > #ARGV then
      return false
    end
    local arity = CAPTURABLE[string.upper(ARGV[i + 1])]
    if not arity or not arity(count) then return false end
    i = i + count + 1
  end
  return true
end

-- Run the captured commands (an RQ enqueue) from ARGV[first..]; check them first.
local function run_commands(first)
  local i = first
  while i <= #ARGV do
    local count = tonumber(ARGV[i])
    redis.call(unpack(ARGV, i + 1, i + count))
    i = i + count + 1
  end
end

-- ARGV value as a whole number of at least `least`, else nil (rejects nan, inf, '1.5', '').
local function whole(value, least)
  local n = tonumber(value)
  if not n or n ~= n or n == math.huge or n == -math.huge or n ~= math.floor(n) then
    return nil
  end
  if least and n < least then return nil end
  return n
end

-- An error reply that writes nothing; call it before the first write.
local function refuse(script, what)
  return redis.error_reply('ERR ' .. script .. ': ' .. what)
end

-- Refusal unless at least `n` arguments came (a missing one would fail later, half-way).
local function too_few(script, n)
  if #ARGV < n then return refuse(script, 'needs ' .. n .. ' arguments, got ' .. #ARGV) end
  return nil
end

-- Change a payment's state: the hash, the count per state and the per-state index.
local function move(pay, states, to)
  local from = redis.call('HGET', pay, 'state')
  if from == to then return end
  local pk = string.sub(pay, #PAYMENT_PREFIX + 1)
  redis.call('HSET', pay, 'state', to)
  if from then
    redis.call('HINCRBY', states, from, -1)
    redis.call('ZREM', STATE_INDEX_PREFIX .. from, pk)
  end
  redis.call('HINCRBY', states, to, 1)
  redis.call('ZADD', STATE_INDEX_PREFIX .. to, now_ms(), pk)
end
