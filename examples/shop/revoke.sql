-- The reversal's effect (REVERSAL_SQL), the same with or without REVERSAL_PER_REFUND: each
-- reversal adds what it takes back to reversed_amount, and the entitlement, all or nothing,
-- is revoked once that reaches what was paid, or at once by a reversal of the whole payment
-- or of what remains (a refund in full, a dispute lost, or 0 left when the amount paid
-- came after refunds reversed one by one took it all: no refund id). A partial refund's
-- own reversal leaves it granted. The ledger runs it once per reversal key (reverse:pi_…,
-- or reverse:pi_…:re_… per refund), so each amount is added once.
UPDATE entitlements
SET reversed_amount = reversed_amount + COALESCE(%(reversal_amount)s, 0),
    revoked_at = CASE
        WHEN CAST(%(reversal_refund_id)s AS text) IS NULL
            OR reversed_amount + COALESCE(%(reversal_amount)s, 0) >= COALESCE(%(amount)s, amount)
        THEN now()
    END
WHERE payment_key = %(payment_key)s AND revoked_at IS NULL
RETURNING id, reversed_amount, revoked_at
