"""What the web worker (webhook/server.py) refuses of a request's line and headers before
the app runs, and the counted reason each refusal gets: what gunicorn's parser refused, a
transfer coding other than chunked, and a SCRIPT_NAME header. docs/WEB.md, "Slow and
malformed HTTP"."""

from collections.abc import Iterable

from gunicorn.http import errors

from webhook.exceptions import Rejected

SERVER_FAULTS = (
    errors.InvalidResponseHeader,
    errors.InvalidResponseHeaderName,
    errors.ConfigurationProblem,
)
"""gunicorn's errors that are the server's, not the client's: gunicorn answers them (500).
ConfigurationProblem is left only to a SCRIPT_NAME in the web process's environment: one
from a request is refused first (:func:`refused_head`)."""
PARSE_ERRORS: tuple[tuple[type[Exception], str, int], ...] = (
    (errors.LimitRequestHeaders, "headers_too_large", 431),
    (errors.LimitRequestLine, "request_line_too_long", 414),
    (errors.ExpectationFailed, "expectation_failed", 417),
    (errors.UnsupportedTransferCoding, "unsupported_transfer_coding", 400),
    (errors.ParseException, "malformed_request", 400),
)
"""What a request gunicorn could not parse is counted as, first match wins."""
Headers = Iterable[tuple[str, str]]


class RefusedHead(errors.ParseException):
    """A request gunicorn parsed and the worker refuses before the app: raised in the
    worker's ``handle_request``, answered and counted by its ``handle_error``."""

    def __init__(self, rejected: Rejected) -> None:
        super().__init__(rejected.detail)
        self.rejected = rejected


def unsupported_coding(headers: Headers) -> Rejected | None:
    """A transfer coding other than chunked. gunicorn refuses unknown ones, but takes
    ``gzip``, ``deflate``, ``compress`` and ``identity`` before ``chunked`` and passes the
    body on still coded: a signed plain body under ``gzip, chunked`` was accepted."""
    for name, value in headers:
        if name != "TRANSFER-ENCODING":
            continue
        codings = [coding.strip(" \t").lower() for coding in value.split(",")]
        if any(coding != "chunked" for coding in codings):
            detail = f"Transfer-Encoding {value[:100]!r}: only chunked is supported"
            return Rejected("unsupported_transfer_coding", 400, detail)
    return None


def refused_head(headers: Headers) -> Rejected | None:
    """The rejection for a parsed request's headers, None if the app may have them.

    A ``SCRIPT_NAME`` header reaches the worker only from a peer in gunicorn's
    ``forwarded_allow_ips`` (its ``forwarder_headers``; from anyone else gunicorn drops it,
    ``header_map = "drop"``), and gunicorn would mount the app under it, answering 500 with
    its HTML page when the path does not start with it. The service is always served at the
    root (Stripe posts to /webhooks/stripe), so whoever sends one, it is refused."""
    headers = list(headers)
    coding = unsupported_coding(headers)
    if coding is not None:
        return coding
    if any(name == "SCRIPT_NAME" for name, _ in headers):
        detail = "the service is served at the root: a SCRIPT_NAME header is not taken"
        return Rejected("script_name_refused", 400, detail)
    return None


def parse_rejection(exc: BaseException) -> Rejected | None:
    """The rejection for a request gunicorn could not parse (or the worker refused); None if
    it is not the client's."""
    if isinstance(exc, RefusedHead):
        return exc.rejected
    if isinstance(exc, SERVER_FAULTS):
        return None
    parsed = getattr(exc, "req", None)
    coding = unsupported_coding(getattr(parsed, "headers", None) or ())
    if coding is not None:  # e.g. "gzip" alone: gunicorn cannot tell where the body ends
        return coding
    for kind, reason, status in PARSE_ERRORS:
        if isinstance(exc, kind):
            return Rejected(reason, status, str(exc)[:200])
    return None
