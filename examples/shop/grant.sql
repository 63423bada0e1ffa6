INSERT INTO entitlements (payment_key, checkout_session_id, client_reference_id, customer_email, product, amount, currency)
VALUES (%(payment_key)s, %(checkout_session_id)s, %(client_reference_id)s, %(customer_email)s, 'pro-plan', %(amount)s, %(currency)s)
RETURNING id
