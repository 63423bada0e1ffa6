"""Credentials out of text before it is stored, logged or shown: the userinfo of a URL, every
query value, Authorization header values, credentials after ``Basic``/``Bearer``, Stripe
keys and secrets (their kind kept), urllib3's quoted paths and conninfo passwords become
``***``, and so does the path of any web URL in it.

Applied to error strings (a requests exception embeds the URL it called, query included);
a configured URL (REDIS_URL, STRIPE_API_BASE, a database action) is shown by
:func:`mask_url`, whatever characters its password holds; :func:`mask_secret` shows a
secret setting (a webhook secret, a token, an API key) by its kind only. An HTTP
downstream is named by its :func:`origin` alone (scheme, host, port): a capability URL
carries its secret in the path or in ``;params`` (``/hooks/T0/B0/XXXX``), which no pattern
can tell from a plain path.
Over-masking is fine; leaking is not.
"""

import base64
import functools
import html
import re
from email.message import Message
from urllib.parse import quote, unquote, urlsplit

MASK = "***"

# scheme://user:password@host -> scheme://***@host, up to the last @ before a space: a
# pasted password holds any character (" ' / # ? @ unencoded), and text cannot tell where
# such a URL ends. A path with an @ is masked too.
_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)\S*@")
# A query (and any fragment after it) up to whitespace or a quote: also the path-only form
# urllib3 puts in its messages ("url: /fulfil?api_key=...").
_QUERY = re.compile(r"\?[^\s'\"<>`]+")
_QUERY_FIELD = re.compile(r"([&;])")
# Authorization: Bearer x / 'Authorization': 'Basic x' / "proxy-authorization": "x"
_AUTHORIZATION = re.compile(
    r"(?P<name>authorization['\"]?\s*[:=]\s*['\"]?)[^'\"\r\n,}]+", re.IGNORECASE
)
# libpq's key=value conninfo, which psycopg's errors may quote: password=x, password='x y'
_CONNINFO_PASSWORD = re.compile(r"(?P<name>\bpassword\s*=\s*)(?:'(?:[^'\\]|\\.)*'?|\S+)", re.I)
# A Stripe secret quoted in a message (Stripe's own errors quote the key, masked or whole):
# its kind kept, as mask_secret shows it.
_STRIPE_SECRET = re.compile(r"\b(?P<kind>(?:whsec|sk|rk)_(?:test_|live_)?)[A-Za-z0-9*]{4,}")
# Credentials after their scheme, wherever a downstream echoes its request's headers.
_CREDENTIALS = re.compile(r"\b(?P<scheme>Basic|Bearer|Token) +[A-Za-z0-9+/=._~-]{4,}", re.I)
# urllib3's "Max retries exceeded with url: /services/T0/B0/XXXX" and requests' "Not Found
# for url: https://host/services/T0/B0/XXXX": a capability URL's secret is in its path,
# which no pattern can tell from a plain one.
_URLLIB3_PATH = re.compile(r"(?P<name>\burl: (?:[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s]+)?)/\S*")
# Any other web URL's path, however a client words its message (httpx's "for url
# 'https://…'", aiohttp's "URL('https://…')") or a body escapes it (JSON's "https:\/\/…"),
# its host a name or an IPv6 literal ("[fd00::1]"): its origin kept, its query masked
# above. The path runs to a quote or a space: masking a ")" after it hides nothing needed.
_WEB_PATH = re.compile(
    r"(?P<origin>\b(?:https?|wss?):(?:\\?/){2}(?:\[[0-9a-z:.%]+\](?::\d+)?|[^\s/\\'\"<>`()\[\]]+))"
    r"(?P<slash>\\?/)[^\s?#'\"<>`]+",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """``text`` with the credentials the module's docstring lists masked."""
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", text)
    text = _QUERY.sub(_mask_query, text)
    text = _CONNINFO_PASSWORD.sub(lambda m: f"{m['name']}{MASK}", text)
    text = _STRIPE_SECRET.sub(lambda m: f"{m['kind']}{MASK}", text)
    text = _CREDENTIALS.sub(lambda m: f"{m['scheme']} {MASK}", text)
    text = _URLLIB3_PATH.sub(lambda m: f"{m['name']}/{MASK}", text)
    text = _WEB_PATH.sub(lambda m: f"{m['origin']}{m['slash']}{MASK}", text)
    return _AUTHORIZATION.sub(lambda m: f"{m['name']}{MASK}", text)


def mask_url(url: str) -> str:
    """A configured URL as shown anywhere: everything between ``scheme://`` and its last
    ``@`` masked (the userinfo, whatever it holds), query values masked; only its scheme
    when the rest cannot be read as a URL. Text that is no URL: :func:`redact`."""
    scheme, sep, rest = url.partition("://")
    if not sep or not _SCHEME.fullmatch(scheme):
        return redact(url)
    userinfo, at, after = rest.rpartition("@")
    if at and _QUERY_VALUE.search(userinfo):  # the @ may be a query value's: hide the rest
        return f"{scheme}://{MASK}"
    shown = f"{scheme}://{MASK + '@' if at else ''}{after}"
    try:
        urlsplit(shown)
    except ValueError:
        return f"{scheme}://{MASK}"
    return _QUERY.sub(_mask_query, shown)


_SCHEME = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*")
_QUERY_VALUE = re.compile(r"\?.*=")


def url_passwords(url: str) -> list[str]:
    """The passwords ``url`` holds, as written and decoded: its userinfo's (read up to the
    last ``@``) and its query's ``password`` values, each once, the longest first (so a
    password is replaced before a part of it)."""
    rest = url.partition("://")[2]
    userinfo, at, _ = rest.rpartition("@")
    found = [userinfo.partition(":")[2]] if at else []
    query = rest.partition("?")[2]
    for field in _QUERY_FIELD.split(query):
        name, equals, value = field.partition("=")
        if equals and name.strip().lower() == "password":
            found.append(value)
    found += [unquote(password) for password in found]
    return sorted({p for p in found if p}, key=len, reverse=True)


# whsec_, sk_test_, rk_live_, pk_test_...: what kind of Stripe secret it is, nothing of the
# secret; any other prefix (an ops token's "abc_") is the secret's own start.
_KEY_PREFIX = re.compile(r"(?:whsec|sk|rk|pk)_(?:test_|live_)?")


def mask_secret(value: str) -> str:
    """Each comma-separated secret in ``value`` as its kind (``sk_test_***``) or ``***``."""
    return ",".join(_mask_one(item) for item in value.split(","))


def _mask_one(item: str) -> str:
    secret = item.strip()
    if not secret:
        return item
    kind = _KEY_PREFIX.match(secret)
    return (kind[0] if kind and kind.end() < len(secret) else "") + MASK


def _mask_query(match: re.Match[str]) -> str:
    fields = _QUERY_FIELD.split(match[0][1:])
    return "?" + "".join(_mask_field(f) for f in fields)


def _mask_field(field: str) -> str:
    """``name=value`` keeps its name; a bare value (``?token``) is masked whole."""
    if field in ("&", ";", ""):
        return field
    name, equals, _ = field.partition("=")
    return f"{name}={MASK}" if equals else MASK


def url_secrets(url: str) -> list[str]:
    """What of ``url`` may be a secret, the longest first: its userinfo (and its Basic
    credentials), its path with any ``;params``, each of its segments that looks like a
    token (a digit in 6 characters or more, or 16 or more), each query value; each as
    written, decoded, percent-encoded, and with ``/`` escaped as JSON may (``\\/``). For
    text a downstream sends back, which may quote the request it was sent."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return []
    userinfo = parts.netloc.rpartition("@")[0]
    found = [userinfo, *userinfo.split(":", 1)] if userinfo else []
    if userinfo:
        found.append(base64.b64encode(unquote(userinfo).encode()).decode())
    if parts.path.strip("/"):
        found.append(parts.path)
        found += [s for s in _PATH_PART.split(parts.path) if _token_like(s)]
    for field in _QUERY_FIELD.split(parts.query):
        found.append(field.partition("=")[2] or field)
    found += [unquote(part) for part in found]
    found += [quote(part, safe="") for part in found] + [p.replace("/", "\\/") for p in found]
    return sorted({p for p in found if len(p) >= 4}, key=len, reverse=True)


_PATH_PART = re.compile(r"[/;=,]")


def _token_like(segment: str) -> bool:
    """A path segment that may be a capability URL's secret rather than a word."""
    return len(segment) >= 16 or (len(segment) >= 6 and any(c.isdigit() for c in segment))


def without(text: str, secrets: list[str]) -> str:
    """``text`` with each of ``secrets`` (the longest first) masked however it is spelled
    (:func:`_spelled_any_way`), then :func:`redact`."""
    for secret in secrets:
        text = _spelled_any_way(secret).sub(MASK, text)
    return redact(text)


@functools.lru_cache(maxsize=512)  # the same URL's secrets, on every receipt
def _spelled_any_way(secret: str) -> re.Pattern[str]:
    """``secret`` as a downstream may echo it back: each character but a letter or a digit
    as written or escaped, whichever way (percent-encoded, JSON's ``\\uXXXX`` or ``\\/``,
    an HTML character reference; a space and a ``+`` as a form decodes either), each
    character its own way."""
    parts = []
    for c in secret:
        if c.isalnum():
            parts.append(re.escape(c))
            continue
        n = ord(c)
        forms = [re.escape(c), f"(?i:\\\\u{n:04x})", f"&#0*{n};", f"(?i:&#x0*{n:x};)"]
        if n < 128:
            forms.append(f"(?i:%{n:02x})")
        if (named := html.escape(c)) != c:
            forms.append(re.escape(named))
        forms += {" ": [r"\+"], "+": [" "], "/": [r"\\/"]}.get(c, [])
        parts.append("(?:" + "|".join(forms) + ")")
    return re.compile("".join(parts))


_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url``: never its userinfo, path, ``;params``, query or
    fragment. ``***`` when it is no URL with a host."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        return MASK
    if not parts.scheme or not parts.hostname:
        return MASK
    if "@" in url.strip().partition(parts.netloc)[2]:
        return MASK  # http://u:123/pw@h: urllib's host and port are a password's start
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}" + (f":{port}" if port else "")


def downstream(action: str) -> str:
    """FULFILMENT_ACTION as shown anywhere: an http(s) URL by its origin (``/***`` where it
    had more), a database URL by :func:`mask_url`, a module as it is."""
    if not action.startswith(("http://", "https://")):
        return mask_url(action)
    named = origin(action)
    more = action.strip().split("://", 1)[1].partition("/")[2] or "?" in action
    return named + ("/***" if more and named != MASK else "")


def mask_email(email: str | None) -> str | None:
    """An email as a list shows it: its first character and its domain (``j***@example.com``),
    enough to tell two customers apart at a glance, not to contact or look one up."""
    if not email:
        return None
    local, at, domain = email.rpartition("@")
    if not at or not local:
        return MASK
    return f"{local[0]}{MASK}@{domain}"


def readable(body: bytes, content_type: str) -> str | None:
    """``body`` as text in the charset its ``Content-Type`` names (else UTF-8), or None when
    it is not text (a NUL in it): masking reads text, and a secret spelled in another
    encoding would pass it."""
    message = Message()
    message["Content-Type"] = content_type
    charset = message.get_content_charset() or "utf-8"
    try:
        text = body.decode(charset, "replace")
    except LookupError:  # a charset Python does not know
        text = body.decode("utf-8", "replace")
    return None if "\x00" in text else text
