"""Values the tests share: the webhook secrets, the ops token and its headers, Stripe's
User-Agent."""

import base64

SECRET = "whsec_test_primary_0123456789abcdef"
OLD_SECRET = "whsec_test_retiring_0123456789abcde"
OPS_TOKEN = "ops-test-token"
STRIPE_UA = "Stripe/1.0 (+https://stripe.com/docs/webhooks)"
BEARER = {"Authorization": f"Bearer {OPS_TOKEN}"}
BASIC = {"Authorization": "Basic " + base64.b64encode(f"ops:{OPS_TOKEN}".encode()).decode()}
