-- A Checkout purchase's line items, read once from Stripe's API (ledger/line_items.py), kept
-- on its payment as `p_items`: the first reading stays (two workers may read at once), and a
-- payment purged meanwhile is not written back as a stub. Answers 1 if kept, else 0.
local KEY = named(KEYS, 'payment')
local ARG = named(ARGV, 'items')
if redis.call('EXISTS', KEY.payment) == 0 then return 0 end
return redis.call('HSETNX', KEY.payment, 'p_items', ARG.items)
