"""The HTTP action: the purchase POSTed as JSON to FULFILMENT_ACTION's (or REVERSAL_ACTION's)
URL with a stable Idempotency-Key, its answer, or the way it failed, mapped to what the
ledger records: applied, refused, the downstream down (never sent, or refused as a whole),
or ambiguous (the call may have applied)."""

import email.utils
import http.client
import os
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urljoin

import requests
from urllib3.exceptions import ConnectTimeoutError, HTTPError, NewConnectionError

from ledger.purchase import Purchase
from ledger.redact import origin, readable, url_secrets, without
from workers.exceptions import (
    AmbiguousDownstreamError,
    PermanentDownstreamError,
    TransientDownstreamError,
)
from workers.http_connections import Unredirected

Receipt = dict[str, Any]


class HttpAction:
    """POST the payment as JSON with a stable Idempotency-Key header, to FULFILMENT_ACTION's
    URL and nowhere else: a redirect is never followed (requests follows 3xx by default,
    turning a POST into a GET of another page or re-POSTing the purchase to another host),
    so only this URL's own answer can fulfil a payment. Its errors name the downstream by
    its origin only (scheme, host, port), with the error's class, the OS's reason and the
    status: never the URL's path, ``;params`` or query, where a capability URL keeps its
    secret. An answer's body is kept masked: the URL's parts that may be a secret (as
    written, decoded, percent-encoded, JSON-escaped) and any credentials (``redact``), then
    its first 200 characters; a 2xx's in the receipt, a refusal's or an error's (4xx, 5xx)
    after its status in the error, on one line (``http 422 from https://host:443: {…}``).

    Its time: a connection not made within ``connect_timeout(timeout)`` is never sent (well
    inside the deadline, so the deadline never takes its place); a 2xx status line is the
    answer, and its body is read raw (no decoding), at most ``BODY_CAP`` bytes and only
    until ``BODY_SHARE`` of the timeout has passed, then the connection is closed: a body
    that trickles, never ends, is huge or is not what its headers say does not undo it. A
    4xx's or 5xx's body is read the same way, before its error is raised: what it does
    changes neither the error's kind nor when the call ends.
    ``abort`` (from the thread waiting for the call, at its deadline) cuts the connection."""

    def __init__(
        self, url: str, timeout: float, replay_safe: bool, setting: str = "FULFILMENT_ACTION"
    ) -> None:
        self.url = url
        self.origin = origin(url)
        self.quoted = url_secrets(url)  # masked wherever the answer quotes them
        self.timeout = timeout
        self.replay_safe = replay_safe
        self.setting = setting  # the one that names it: FULFILMENT_ACTION, REVERSAL_ACTION
        self._sock: socket.socket | None = None  # the call's connection: ``abort``'s to cut
        self._sock_lock = threading.Lock()

    def __call__(self, purchase: Purchase) -> Receipt:
        started = time.monotonic()
        try:
            with Unredirected(self._connected) as session:
                answer = session.post(
                    self.url,
                    json=purchase.to_dict(),
                    headers={"Idempotency-Key": purchase.idempotency_key},
                    timeout=(connect_timeout(self.timeout), self.timeout),
                    allow_redirects=False,
                    stream=True,  # the body is read by _answered, bounded, or not at all
                )
                with answer:  # closes the connection, whatever is left of the body
                    return self._answered(answer, started + self.timeout * BODY_SHARE)
        except (requests.ConnectionError, requests.ConnectTimeout) as exc:
            if isinstance(exc, requests.ConnectTimeout) or _never_sent(exc):
                raise TransientDownstreamError(self._failed(exc), down=True, sent=False) from exc
            raise AmbiguousDownstreamError(self._failed(exc)) from exc
        except requests.RequestException as exc:  # read timeout and the like: it may have applied
            raise AmbiguousDownstreamError(self._failed(exc)) from exc
        finally:
            self._connected(None)

    def _connected(self, sock: socket.socket | None) -> None:
        with self._sock_lock:
            self._sock = sock

    def abort(self) -> None:
        """At the call's deadline, from the thread waiting for it (a worker's slot, which no
        signal reaches): shut its connection's socket down, so a downstream that trickles
        its answer ends the call at once (ambiguous: the deadline's) instead of the
        watchdog ending the worker process with every other call in flight."""
        with self._sock_lock:
            if self._sock is None:
                return
            try:  # a duplicate's shutdown, not the socket's own (TLS drops its state on it)
                with socket.socket(fileno=os.dup(self._sock.fileno())) as sock:
                    sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # closed meanwhile: the call has ended
                pass

    def _answered(self, answer: requests.Response, body_until: float) -> Receipt:
        """The receipt of a 2xx (applied now, or the stored answer to a key already
        applied), else the error its status means."""
        status = answer.status_code
        if 200 <= status < 300:
            return {"status": status, "body": self._excerpt(answer, body_until)}
        if status < 200:  # an interim 1xx (102, 103) that http.client took for the answer:
            # the final one, unread, may say it applied (http.client skips only 100); up
            interim = f"http {status} from {self.origin}: interim answer"
            raise AmbiguousDownstreamError(interim, answered=True)
        if 300 <= status < 400:  # it reached a server that may have acted on it
            raise AmbiguousDownstreamError(redirected(self.url, answer, self.setting))
        said = one_line(self._excerpt(answer, body_until))  # the downstream's own words
        head, tail = f"http {status} from {self.origin}", f": {said}" if said else ""
        refused = head + tail
        if status == 407:  # only a proxy asks for its credentials: it sent nothing on
            raise TransientDownstreamError(f"{refused} ({PROXY_LOGIN})", down=True, sent=False)
        if status in (502, 504):  # a gateway's answer: the origin may have applied it
            raise AmbiguousDownstreamError(refused, down=True)
        if status in (429, 503):  # the downstream as a whole refuses for now
            wait = retry_after(answer.headers.get("Retry-After", ""))
            raise TransientDownstreamError(refused, down=True, retry_after=wait)
        if status == 409:  # a request with this key still in progress (Stripe's, the IETF
            # Idempotency-Key draft's): not applied yet, and it may yet fail; ask again later
            raise TransientDownstreamError(f"{head}: {KEY_IN_USE}{tail}")
        if status in NOT_HANDLED:  # refused before any handler ran: nothing applied
            raise TransientDownstreamError(refused)
        if status >= 500:  # a handler may fail after its commit: it may have been applied
            raise AmbiguousDownstreamError(refused, answered=True)
        raise PermanentDownstreamError(refused)

    def _excerpt(self, answer: requests.Response, until: float) -> str:
        """The first KEPT characters of the answer's body (:meth:`_body`), the URL's parts
        and any credentials masked in it. Masked before it is cut: a secret across the cut
        would leave its start."""
        encoding = answer.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):  # read as sent, not decoded: bytes, not words
            return f"[a {encoding[:20]} body, not shown]"
        text = readable(self._body(answer, until), answer.headers.get("Content-Type", ""))
        if text is None:  # UTF-16 with no charset said, binary: its secrets unreadable as text
            return "[a body that is not text, not shown]"
        return without(text, self.quoted)[:KEPT]

    def _body(self, answer: requests.Response, until: float) -> bytes:
        """At most BODY_CAP bytes of the answer's body as sent (not decoded), read until
        ``until`` (time.monotonic()), when a timer cuts the connection (a socket's timeout
        bounds each recv, not a trickle of them); whatever the body does (ends early,
        trickles, breaks its framing), what came before."""
        got = b""
        timer = threading.Timer(max(until - time.monotonic(), 0.0), self.abort)
        timer.daemon = True
        timer.start()
        try:
            while len(got) < BODY_CAP and time.monotonic() < until:
                chunk = answer.raw.read1(BODY_CAP - len(got), decode_content=False)
                if not chunk:
                    break
                got += chunk
        except (OSError, HTTPError, http.client.HTTPException, ValueError):
            pass  # cut, or a body that breaks its own framing: the status stands
        finally:
            timer.cancel()
            timer.join()  # it cut this call's connection or never will: never the next's
        return got

    def _failed(self, exc: requests.RequestException) -> str:
        """``http: ConnectionError (Connection refused) calling http://host:port``."""
        reason = f" ({tunnel})" if (tunnel := _tunnel_refused(exc)) else _os_reason(exc)
        return f"http: {type(exc).__name__}{reason} calling {self.origin}"


KEY_IN_USE = (
    "its Idempotency-Key is in use (a request with it still running); a key already applied "
    "is answered with its stored 2xx, not 409"
)
PROXY_LOGIN = "the egress proxy asks for credentials: HTTP_PROXY's; nothing was sent on"
NOT_HANDLED = (501, 505, 511)
"""Server errors that say no handler ran: the method or HTTP version not served, a proxy's
login (network authentication) page."""


CONNECT_SHARE = 0.5
CONNECT_CAP_S = 3.05
"""A connection not made within half of FULFILMENT_TIMEOUT, at most 3.05 s (a SYN and its
first two retransmissions, 1 s and 3 s on Linux), counts as never sent."""
BODY_SHARE = 0.8
"""An answer's body is read until this share of FULFILMENT_TIMEOUT since the call began:
well before the deadline, which would make an applied call ambiguous."""
BODY_CAP = 4096
"""Bytes of an answer's body read, at most: the receipt or the error keeps KEPT characters."""
KEPT = 200
"""Characters of an answer's body kept, once masked: a 2xx's in its receipt, a 4xx's or
5xx's in its error."""


def one_line(text: str) -> str:
    """``text`` as one line of printable characters: an error is shown in a log line, a
    table cell, a terminal."""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())


def connect_timeout(timeout: float) -> float:
    """The connect timeout of a call whose deadline is ``timeout`` seconds."""
    return min(timeout * CONNECT_SHARE, CONNECT_CAP_S)


def redirected(url: str, answer: requests.Response, setting: str = "FULFILMENT_ACTION") -> str:
    """What a 3xx answer to ``url`` says, naming both ends by origin only: a permanent move
    (301, 308) is a misconfiguration a person fixes in ``setting``."""
    status, location = answer.status_code, answer.headers.get("Location", "").strip()
    try:
        to = origin(urljoin(url, location)) if location else "none"
    except ValueError:  # urljoin refuses some (an unclosed IPv6 bracket): no origin to name
        to = origin("")
    said = f"http {status} from {origin(url)}"
    if status in (301, 308):
        fix = f"{setting} should name the new URL"
        return f"{said}: the endpoint moved (Location on {to}); {fix}"
    return f"{said}: a redirect (Location on {to}), not followed"


def retry_after(header: str) -> float:
    """Seconds a ``Retry-After`` header asks for (delta-seconds or an HTTP date), else 0."""
    header = header.strip()
    if header.isascii() and header.isdigit():  # str.isdigit() also takes '²' and '١٢'
        return float(header)
    try:
        when = email.utils.parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return 0.0
    return max(when.timestamp() - time.time(), 0.0)


NEVER_SENT = (
    NewConnectionError,  # refused, unreachable, and NameResolutionError: any DNS failure
    ConnectTimeoutError,
    socket.gaierror,
    ConnectionRefusedError,
    ssl.SSLCertVerificationError,  # the handshake, before any byte of the request
    ssl.CertificateError,
)
"""Errors that end a call before its request was sent. Any other SSL error may come after
(a connection reset mid-answer is one too): the call may have applied."""


def _never_sent(exc: requests.ConnectionError) -> bool:
    """True when the connection itself failed (refused, DNS, the downstream's certificate,
    a proxy that refused the tunnel), so the request never left."""
    return any(isinstance(err, NEVER_SENT) for err in _chain(exc)) or bool(_tunnel_refused(exc))


def _tunnel_refused(exc: BaseException) -> str:
    """A proxy's refusal of the tunnel to an https downstream (its answer to ``CONNECT``,
    e.g. ``Tunnel connection failed: 407 Proxy Authentication Required``: http.client's
    words, a status line), else ''."""
    for err in _chain(exc):
        if isinstance(err, OSError) and str(err).startswith(TUNNEL_REFUSED):
            return str(err)[:120]
    return ""


TUNNEL_REFUSED = "Tunnel connection failed"


def _os_reason(exc: BaseException) -> str:
    """`` (Connection refused)``: the OS's words for the first errno in the exception's
    chain, or the TLS library's reason (``CERTIFICATE_VERIFY_FAILED``), which name no URL;
    else ''. An SSL error's errno is the library's code, not the OS's."""
    for err in _chain(exc):
        if isinstance(err, ssl.SSLError) and isinstance(err.reason, str):
            return f" ({err.reason})"
        if isinstance(err, ssl.SSLError):
            continue
        if isinstance(err, OSError) and isinstance(err.errno, int) and err.errno > 0:
            return f" ({os.strerror(err.errno)})"
    return ""


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception and those it wraps (causes, contexts, urllib3's ``reason``, args)."""
    todo, seen = [exc], set()
    while todo:
        err = todo.pop(0)
        if id(err) in seen:
            continue
        seen.add(id(err))
        yield err
        linked = (err.__cause__, err.__context__, getattr(err, "reason", None), *err.args)
        todo += [e for e in linked if isinstance(e, BaseException)]
