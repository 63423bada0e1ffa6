"""The connections the HTTP action makes: one session per call that follows no redirect,
whose connections tell the action their socket (for its ``abort``) and look their host up
within the connect timeout.

The lookup runs in a thread of its own: glibc's resolver waits in C and retries its poll
when a signal interrupts it, so neither the deadline's signal nor a slot's ``abort`` (no
connection to cut yet) would end a lookup a DNS server never answers, and the watchdog
would end the worker with every call it has in flight. A name not looked up within the
connect timeout is a connection never made: down, never sent. Through an HTTP(S)_PROXY the
connection is the proxy's: its name is looked up so, its socket is told (``abort`` cuts a
call the proxy relays), and the proxy looks the downstream's name up."""

import ipaddress
import queue
import socket
import threading
from collections.abc import Callable, Generator
from typing import Any, cast

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError
from urllib3.util.connection import allowed_gai_family

Told = Callable[[socket.socket | None], None]


class Unredirected(requests.Session):
    """A session (one per call, as ``requests.post`` makes) that neither follows nor
    prepares a redirect: with ``allow_redirects=False`` requests still parses a 3xx's
    Location to prepare the next request, and raises ValueError on one it cannot parse.
    ``connected`` (when given) is told each connection's socket once it is made."""

    def __init__(self, connected: Told | None = None) -> None:
        super().__init__()
        if connected is not None:
            for scheme in ("http://", "https://"):
                self.mount(scheme, Telling(connected))

    def resolve_redirects(
        self, *args: Any, **kwargs: Any
    ) -> Generator[requests.Response, None, None]:
        yield from ()


class Telling(HTTPAdapter):
    """requests' adapter whose connections, direct or to a proxy, look their host up within
    the connect timeout (:func:`addresses_within`) and tell ``connected`` their socket once
    made. A SOCKS proxy's connections (PySocks, when installed) are left as they are: they
    may hand the name to the proxy, so it is not looked up here."""

    def __init__(self, connected: Told) -> None:
        self.connected = connected
        super().__init__()

    def get_connection_with_tls_context(self, *args: Any, **kwargs: Any) -> Any:
        pool = cast(HTTPConnectionPool, super().get_connection_with_tls_context(*args, **kwargs))
        base = pool.ConnectionCls
        if base in (HTTPConnection, HTTPSConnection):  # the pool's own, not yet bounded
            pool.ConnectionCls = bounded(cast(type[HTTPConnection], base), self.connected)
        return pool


def bounded(base: type[HTTPConnection], told: Told) -> type[HTTPConnection]:
    """``base`` whose host is looked up within its connect timeout, then connected to each
    address in turn, each within the connect timeout as urllib3 does (one address that
    drops connections must not use up another's time), and whose socket is told once
    connected."""

    def new_conn(conn: HTTPConnection) -> socket.socket:
        name, timeout = conn._dns_host, conn.timeout
        seconds = timeout if isinstance(timeout, int | float) else None
        try:
            addresses = addresses_within(name, conn.port, seconds)
        except socket.gaierror as exc:
            raise NameResolutionError(conn.host, conn, exc) from exc
        except TimeoutError as exc:
            said = f"no address for {conn.host} within {seconds} s (its DNS lookup)"
            raise ConnectTimeoutError(conn, said) from exc
        failed: Exception | None = None
        for address in addresses:
            conn._dns_host = address  # the socket's address only: TLS and Host name `name`
            try:
                return base._new_conn(conn)
            except (NewConnectionError, ConnectTimeoutError) as exc:
                failed = exc
            finally:
                conn._dns_host = name
        raise failed or NewConnectionError(conn, f"no address for {conn.host}")

    def connect(conn: HTTPConnection) -> None:
        base.connect(conn)
        told(conn.sock)

    return type(f"Telling{base.__name__}", (base,), {"_new_conn": new_conn, "connect": connect})


def addresses_within(host: str, port: int, seconds: float | None) -> list[str]:
    """``host``'s addresses in getaddrinfo's order (an address is its own), looked up in a
    daemon thread and waited for at most ``seconds``: TimeoutError after (the thread ends
    when the resolver gives up), socket.gaierror when the name has none."""
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    found: queue.Queue[list[Any] | OSError] = queue.Queue(1)

    def look_up() -> None:
        try:
            found.put(socket.getaddrinfo(host, port, allowed_gai_family(), socket.SOCK_STREAM))
        except OSError as exc:
            found.put(exc)

    threading.Thread(target=look_up, name=f"lookup {host}", daemon=True).start()
    try:
        got = found.get(timeout=seconds)
    except queue.Empty:
        raise TimeoutError(f"no address for {host} within {seconds} s") from None
    if isinstance(got, OSError):
        raise got
    return list(dict.fromkeys(str(info[4][0]) for info in got))
