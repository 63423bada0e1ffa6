INSERT INTO entitlements (payment_key, client_reference_id, customer_email, product, amount, currency)
VALUES (%(payment_key)s, %(client_reference_id)s, %(customer_email)s, 'pro-plan', %(amount)s, %(currency)s)
RETURNING id
