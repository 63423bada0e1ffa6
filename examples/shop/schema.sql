-- The shop's own table: what each customer may use. The service's PostgreSQL action adds one
-- row per paid payment (grant.sql), in the transaction that records the payment's key in
-- webhook_ledger_effects, so a payment grants once however often it is delivered or retried;
-- each reversal (revoke.sql, in the transaction that records its key) adds what it takes back
-- to reversed_amount and sets revoked_at once the payment is taken back in full.
CREATE TABLE IF NOT EXISTS entitlements (
    id bigserial PRIMARY KEY,
    payment_key text NOT NULL,
    checkout_session_id text,
    client_reference_id text,
    customer_email text,
    product text NOT NULL,
    amount bigint,
    currency text,
    granted_at timestamptz NOT NULL DEFAULT now(),
    reversed_amount bigint NOT NULL DEFAULT 0,
    revoked_at timestamptz
);
-- a table made before these columns
ALTER TABLE entitlements ADD COLUMN IF NOT EXISTS revoked_at timestamptz;
ALTER TABLE entitlements ADD COLUMN IF NOT EXISTS checkout_session_id text;
ALTER TABLE entitlements ADD COLUMN IF NOT EXISTS reversed_amount bigint NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS entitlements_by_session ON entitlements (checkout_session_id);
