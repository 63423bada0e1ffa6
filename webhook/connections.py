"""Which connections a web process holds, and which one gives way when it must make room.

One registry per gunicorn worker (webhook/server.py), keyed by the connection's greenlet.
Each connection is in one phase: ``IDLE`` (waiting for a request's line and headers: a new
connection or a kept-alive one between requests), ``BODY`` (its body being read), ``APP``
(the app running) or ``WRITE`` (its answer being written, under a deadline). Near the cap
the oldest IDLE, BODY or WRITE connection is shed: an IDLE or BODY one has its read side
shut, so its next read sees the end of the stream (a request it already read, pipelined, is
its last, and that answer's write is aborted at its deadline); a WRITE one (a client that
does not read its answers) is aborted, so its write fails at once and its close resets it.
A connection in APP is never touched. Standard library only: how the worker reacts to a shed
connection is its business. Why and the capacity: docs/WEB.md, "Slow and
malformed HTTP".
"""

import _socket
import ipaddress
import socket
import struct
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Collection, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

IDLE, BODY, APP, WRITE = "idle", "body", "app", "write"
SHEDDABLE = (IDLE, BODY, WRITE)


def headroom(cap: int) -> int:
    """Connections a process accepts beyond its cap, so that a new one is not left in the
    listen backlog while an old idle or slow one is shed to make room for it."""
    return max(10, cap // 10)


@dataclass(frozen=True)
class Limits:
    cap: int
    """Connections served at once (gunicorn's worker_connections)."""
    per_address: int
    """Connections at once from one remote address; 0: no cap."""
    requests: int
    """Requests served on one connection; the answer to the last says Connection: close."""
    lifetime: float
    """Seconds a connection is kept; the first answer after it says Connection: close."""
    trusted: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    """Proxies: exempt from the per-address cap (everyone behind one shares its address)."""
    ipv6_prefix: int = 64
    """IPv6 addresses count against the per-address cap by this many leading bits: one
    host's network (a /64) holds more addresses than anyone could cap one by one."""


@dataclass(eq=False)
class Connection:
    sock: Any
    address: str
    opened: float
    phase: str = IDLE
    requests: int = 0
    shed: bool = False
    request: Any = None
    """gunicorn's request being served, if any (its ``must_close`` ends the connection)."""
    capped: bool = True
    """Counted against its address's cap (not a trusted proxy)."""


Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_address(text: str | None) -> Address | None:
    """The address in ``text``, an IPv4-mapped IPv6 one (``::ffff:10.0.0.7``, as a dual-stack
    socket reports an IPv4 peer) as the IPv4 address it is; None for a non-address."""
    try:
        ip = ipaddress.ip_address((text or "").strip())
    except ValueError:
        return None
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return mapped or ip


def cap_key(address: str, ipv6_prefix: int) -> str:
    """What the per-address cap counts ``address`` under: an IPv4 address itself, an IPv6
    one by its first ``ipv6_prefix`` bits (``2001:db8::/64``)."""
    ip = parse_address(address)
    if isinstance(ip, ipaddress.IPv6Address):
        return str(ipaddress.ip_network((ip, ipv6_prefix), strict=False))
    return str(ip) if ip is not None else address


def is_trusted(address: str | None, trusted: Collection[Any]) -> bool:
    """Whether ``address`` is one of the ``trusted`` networks (False for a non-address); an
    IPv4-mapped address as its IPv4 address, or as written (a network listed that way)."""
    if not trusted:
        return False
    ip = parse_address(address)
    if ip is None:
        return False
    written = ipaddress.ip_address((address or "").strip())
    return any(ip in network or written in network for network in trusted)


def client_address(remote: str | None, forwarded: str | None, trusted: Iterable[Any]) -> str | None:
    """The client's address: the peer's, unless the peer is a trusted proxy; then the last
    address of ``X-Forwarded-For`` that is not a trusted proxy (each proxy appends the
    address it saw, so only what trusted proxies appended can be believed). IPv4-mapped
    addresses as their IPv4 address."""
    trusted = tuple(trusted)
    peer = parse_address(remote)
    remote = str(peer) if peer is not None else remote
    if not forwarded or not is_trusted(remote, trusted):
        return remote
    for hop in reversed(forwarded.split(",")):
        if not is_trusted(hop, trusted):
            ip = parse_address(hop)
            return str(ip) if ip is not None else remote  # not an address: believe no more
    return remote


class Connections:
    """The connections of one process: opened, moved between phases, shed, closed."""

    def __init__(self, limits: Limits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits, self.clock = limits, clock
        self.live: OrderedDict[Hashable, Connection] = OrderedDict()
        """Oldest phase change first: the front is the first to shed."""
        self.per_address: Counter[str] = Counter()
        self.shedding = 0
        """Connections shed and not yet closed."""

    def open(self, key: Hashable, sock: Any, address: str) -> Connection | None:
        """Register a new connection; None if its address is at its cap (refuse it)."""
        capped = not is_trusted(address, self.limits.trusted)
        cap = self.limits.per_address
        address = cap_key(address, self.limits.ipv6_prefix)
        if capped and cap and self.per_address[address] >= cap:
            return None
        conn = Connection(sock, address, self.clock(), capped=capped)
        if capped:
            self.per_address[address] += 1
        while self.serving() >= self.limits.cap and self.shed_one():
            pass
        self.live[key] = conn
        return conn

    def close(self, key: Hashable) -> None:
        conn = self.live.pop(key, None)
        if conn is not None and conn.shed:
            self.shedding -= 1
        if conn is not None and conn.capped:
            self.per_address[conn.address] -= 1
            if not self.per_address[conn.address]:
                del self.per_address[conn.address]

    def enter(self, key: Hashable, phase: str) -> Connection | None:
        """Move the connection to ``phase``, as the newest of the queue."""
        conn = self.live.get(key)
        if conn is not None:
            conn.phase = phase
            self.live.move_to_end(key)
        return conn

    def start_request(self, key: Hashable, request: Any) -> Connection | None:
        """A request's headers are in: its body is read next. The last request a connection
        may carry (REQUESTS_PER_CONNECTION, CONNECTION_LIFETIME) closes it, and so does any
        request of a connection already shed: one shed while idle may still hold requests
        its client pipelined, read before its read side was shut."""
        conn = self.enter(key, BODY)
        if conn is not None:
            conn.requests += 1
            conn.request = request
            if not self.keep_alive(conn):
                request.must_close = True
        return conn

    def close_after(self, key: Hashable) -> None:
        """Close the connection once the current answer is sent (``Connection: close``)."""
        conn = self.live.get(key)
        if conn is not None and conn.request is not None:
            conn.request.must_close = True

    def serving(self) -> int:
        """Connections held and not being shed."""
        return len(self.live) - self.shedding

    def keep_alive(self, conn: Connection) -> bool:
        """Whether the connection may serve another request after this one."""
        fresh = self.clock() - conn.opened < self.limits.lifetime
        return conn.requests < self.limits.requests and fresh and not conn.shed

    def shed_one(self) -> bool:
        """Shed the connection that has been idle, slow or unread the longest; False if none
        is."""
        for conn in self.live.values():
            if conn.phase in SHEDDABLE and not conn.shed:
                self.shed(conn)
                return True
        return False

    def write_expired(self, key: Hashable) -> None:
        """The connection's answer was not taken within its deadline: shed it (one shed
        before, while idle, had only its read side shut: now its write is aborted)."""
        conn = self.live.get(key)
        if conn is not None and conn.phase == WRITE:
            self.shed(conn)

    def shed(self, conn: Connection) -> None:
        """Shed the connection in its phase: counted once however often it is shed."""
        if not conn.shed:
            conn.shed = True
            self.shedding += 1
            if conn.request is not None:  # its request, if its body is still read, is its last
                conn.request.must_close = True
        if conn.phase == WRITE:
            abort(conn.sock)
        else:
            shut_reading(conn.sock)


def shut_reading(sock: Any) -> None:
    """Shut the read side: a read blocked on it wakes up and sees the end of the stream.
    Through the C socket module: gevent's own ``shutdown`` would instead fail that read with
    EBADF ("closed in another greenlet")."""
    _shutdown(sock, socket.SHUT_RD)


def abort(sock: Any) -> None:
    """Shut both sides, so a write blocked on a client that does not read fails at once
    (EPIPE), and make its close a reset: the unread answer is dropped, not kept in the
    kernel for a client that will never take it."""
    _shutdown(sock, socket.SHUT_RDWR, linger=True)


def _shutdown(sock: Any, how: int, linger: bool = False) -> None:
    raw = _socket.socket(fileno=sock.fileno())
    try:
        if linger:
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        raw.shutdown(how)
    except OSError:
        pass  # already gone
    finally:
        raw.detach()
