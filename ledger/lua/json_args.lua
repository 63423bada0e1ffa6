-- The JSON arguments of the scripts that write a payment's purchase fields (ledger/scripts.py
-- JSON_ARG_SCRIPTS), read and checked before the script's first write (a refusal after one
-- would leave it half done): after the prelude.

-- A JSON object of purchase fields, p_* names to string values, as argument `name`
-- (ledger/purchase_fields.py); refused, naming it, if it is anything else.
local function p_fields_of(text, name)
  local ok, fields = pcall(cjson.decode, text)
  if not ok or type(fields) ~= 'table' then
    refuse(name .. ' must be a JSON object, got ' .. shown(text))
  end
  for field, value in pairs(fields) do
    if type(field) ~= 'string' or string.sub(field, 1, 2) ~= 'p_' or type(value) ~= 'string' then
      refuse(name .. ' must map p_* fields to strings, got ' .. shown(tostring(field)))
    end
  end
  return fields
end

-- The purchase's fields this event carries, or '' for none (nil).
local function purchase_arg(text)
  if text == '' then return nil end
  return p_fields_of(text, 'purchase')
end

-- What a refund or dispute event says was taken back (ledger/reversals.py): a JSON object
-- with `refunds` (refund id -> amount, -1 for a failed one), `failed` (refund id -> [amount,
-- made at, said failed at]), `charge_refunded` and `charge_at`, `dispute` and
-- `dispute_status` (closed), `dispute_open` and `dispute_event` (any other dispute event),
-- `dispute_at` (either's `created`), `notes` (id -> [created, reason or null, metadata,
-- updated]), or '' (nil).
local function taken_arg(text)
  if text == '' then return nil end
  local ok, taken = pcall(cjson.decode, text)
  if not ok or type(taken) ~= 'table' then
    refuse('taken must be a JSON object, got ' .. shown(text))
  end
  for id, amount in pairs(type(taken.refunds) == 'table' and taken.refunds or {}) do
    if type(id) ~= 'string' or type(amount) ~= 'number' or amount ~= math.floor(amount) then
      refuse('taken.refunds must map refund ids to whole amounts, got ' .. shown(text))
    end
  end
  for id, f in pairs(type(taken.failed) == 'table' and taken.failed or {}) do
    local whole = type(f) == 'table' and #f == 3
    for i = 1, 3 do whole = whole and type(f[i]) == 'number' and f[i] == math.floor(f[i]) end
    if type(id) ~= 'string' or not whole then
      refuse('taken.failed must map refund ids to [amount, made, failed], got ' .. shown(text))
    end
  end
  for id, n in pairs(type(taken.notes) == 'table' and taken.notes or {}) do
    if type(id) ~= 'string' or type(n) ~= 'table' or type(n[1]) ~= 'number'
      or (n[2] ~= cjson.null and type(n[2]) ~= 'string') or type(n[3]) ~= 'table'
      or (n[4] ~= nil and type(n[4]) ~= 'number') then
      refuse('taken.notes must map ids to [created, reason, metadata, updated], got ' ..
        shown(text))
    end
  end
  if (taken.notes and type(taken.notes) ~= 'table')
    or (taken.refunds and type(taken.refunds) ~= 'table')
    or (taken.failed and type(taken.failed) ~= 'table')
    or (taken.charge_refunded and type(taken.charge_refunded) ~= 'number')
    or (taken.charge_at and type(taken.charge_at) ~= 'number')
    or (taken.dispute and (type(taken.dispute) ~= 'string'
      or type(taken.dispute_status) ~= 'string'))
    or (taken.dispute_at and type(taken.dispute_at) ~= 'number')
    or (taken.dispute_open and (type(taken.dispute_open) ~= 'string'
      or type(taken.dispute_event) ~= 'string' or type(taken.dispute_at) ~= 'number')) then
    refuse('taken has a field of the wrong type: ' .. shown(text))
  end
  return taken
end
