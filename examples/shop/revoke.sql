UPDATE entitlements SET revoked_at = now()
WHERE payment_key = %(payment_key)s AND revoked_at IS NULL
RETURNING id, revoked_at
