-- Purchase fields read from Stripe's API for a payment (ledger/purchase_reads.py): its Checkout
-- Session's line items (`p_items`), its invoice's lines (`p_in_lines_all`), or the session
-- itself found by its PaymentIntent. Each field's first reading stays (two workers may read
-- at once; a webhook's copy may be there already), and a payment purged meanwhile is not
-- written back as a stub. Answers how many fields were kept.
local KEY = named(KEYS, 'payment')
local ARG = named(ARGV, 'fields')
local fields = p_fields_of(ARG.fields, 'fields')
if redis.call('EXISTS', KEY.payment) == 0 then return 0 end
local kept = 0
for field, value in pairs(fields) do
  kept = kept + redis.call('HSETNX', KEY.payment, field, value)
end
return kept
