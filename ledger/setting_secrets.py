"""What a secret or token setting may hold (ledger/setting_kinds.py's kinds): the webhook
signing secrets and their labels, the ops tokens and their labels, a Stripe API key.
Standard library only, as setting_kinds.py. A refusal names what is wrong and never
quotes a secret or token (a label, which is neither, it names)."""

import re

from ledger.setting_kinds import Invalid, Kind, listed

_SECRET_PREFIX = "whsec_"
_API_KEY_PREFIXES = ("sk_", "rk_")
_LABEL = re.compile(r"[A-Za-z0-9_.@-]{1,64}")


def token() -> Kind:
    """A bearer token or password: any printable text without surrounding spaces."""

    def parse(text: str) -> str:
        if text != text.strip():
            raise Invalid("it has leading or trailing spaces")
        if not text.isprintable():
            raise Invalid("it has control characters")
        return text

    return Kind(parse, "a token without spaces around it")


def tokens() -> Kind:
    """One or more bearer tokens (token()'s rules for the whole text)."""
    allowed = "one or more tokens, comma-separated, without spaces around them"
    return Kind(lambda text: listed(allowed).parse(token().parse(text)), allowed)


def _token_label(label: str, *_: int) -> str:
    if not _LABEL.fullmatch(label):
        raise Invalid(f"label {label!r} has a character other than A-Z a-z 0-9 _ . @ -")
    return label


def token_labels() -> Kind:
    return listed("one label per token, comma-separated, each of A-Z a-z 0-9 _ . @ -", _token_label)


def _secret(item: str, position: int, count: int) -> str:
    if not item.startswith(_SECRET_PREFIX) or item == _SECRET_PREFIX:
        what = (
            "a Stripe API key, not a webhook signing secret"
            if item.startswith(("sk_", "rk_", "pk_"))
            else f"it does not start with {_SECRET_PREFIX}"
        )
        raise Invalid(f"secret {position} of {count}: {what}")
    return item


def webhook_secrets() -> Kind:
    allowed = "one or more webhook signing secrets whsec_…, comma-separated"
    return listed(allowed + " (the endpoint's, from the Dashboard or 'stripe listen')", _secret)


def _secret_label(label: str, *_: int) -> str:
    if label.isdigit():
        raise Invalid(f"label {label} is a plain number")
    return label


def labels() -> Kind:
    allowed = "one label per secret, comma-separated, not plain numbers (they read as positions)"
    return listed(allowed, _secret_label)


def api_key() -> Kind:
    def parse(text: str) -> str:
        if not text.startswith(_API_KEY_PREFIXES) or text != text.strip():
            what = "a webhook signing secret, not an API key" if text.startswith("whsec_") else ""
            raise Invalid(what)
        return text

    return Kind(parse, "a Stripe secret or restricted API key (sk_… or rk_…)")
