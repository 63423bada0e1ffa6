"""The connection registry of a web process (webhook/connections.py): which connection gives
way near the cap, the per-address cap, trusted proxies, and how long a connection lives."""

import ipaddress
import socket
from collections.abc import Iterator
from dataclasses import replace

import pytest

from webhook.connections import (
    APP,
    BODY,
    WRITE,
    Connections,
    Limits,
    cap_key,
    client_address,
    is_trusted,
)

PROXY = (ipaddress.ip_network("10.0.0.0/8"),)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def pairs() -> Iterator[list[tuple[socket.socket, socket.socket]]]:
    made: list[tuple[socket.socket, socket.socket]] = []
    yield made
    for a, b in made:
        a.close()
        b.close()


def connect(pairs: list, registry: Connections, key: str, address: str = "192.0.2.1"):
    ours, theirs = socket.socketpair()
    pairs.append((ours, theirs))
    return registry.open(key, ours, address), theirs


def limits(cap: int = 3, per_address: int = 0, requests: int = 100, lifetime: float = 60.0):
    return Limits(cap, per_address, requests, lifetime, PROXY)


def test_at_the_cap_the_oldest_idle_or_slow_connection_gives_way(pairs) -> None:
    registry = Connections(limits(cap=3))
    a, _ = connect(pairs, registry, "a")
    b, _ = connect(pairs, registry, "b")
    c, _ = connect(pairs, registry, "c")
    registry.enter("a", APP)  # a is being answered: never shed
    registry.enter("b", BODY)  # b's body began after c opened: c is the older phase
    d, _ = connect(pairs, registry, "d")
    assert (a.shed, b.shed, c.shed, d.shed) == (False, False, True, False)
    assert c.sock.recv(1) == b""  # its read side is shut: a blocked read sees the end
    assert registry.serving() == 3
    registry.close("c")
    assert registry.serving() == 3 and len(registry.live) == 3


def unread(sock: socket.socket) -> None:
    """Fill the connection's send buffer: a client that never reads its answers."""
    sock.setblocking(False)
    try:
        while sock.send(b"x" * 65536):
            pass
    except BlockingIOError:
        pass


def test_a_connection_whose_answer_is_not_read_is_shed_at_the_cap_or_at_its_deadline(
    pairs,
) -> None:
    registry = Connections(limits(cap=2))
    a, _ = connect(pairs, registry, "a")
    b, _ = connect(pairs, registry, "b")
    registry.enter("a", WRITE)  # its client never reads: the write would block
    registry.enter("b", APP)
    unread(a.sock)
    connect(pairs, registry, "c")
    assert a.shed and not b.shed
    with pytest.raises(BrokenPipeError):  # the blocked write fails at once
        a.sock.send(b"answer")
    registry.close("a")
    registry.enter("b", WRITE)
    registry.write_expired("b")  # its deadline passed before the cap was reached
    assert b.shed and registry.serving() == 1
    registry.write_expired("c")  # not writing: untouched
    assert not registry.live["c"].shed


class Request:
    must_close = False


def test_a_connection_shed_while_idle_ends_after_a_request_it_had_already_read(pairs) -> None:
    """A client pipelining requests has several in the parser's buffer when its connection
    is shed while idle: shutting the read side ends none of them. The next one is its last,
    and if that answer is not read in time its write is aborted (the connection was shed
    already, so the deadline did nothing and the write blocked for ever)."""
    registry = Connections(limits(cap=1))
    a, _ = connect(pairs, registry, "a")
    connect(pairs, registry, "b")
    assert a.shed
    request = Request()
    registry.start_request("a", request)
    assert request.must_close
    registry.enter("a", WRITE)
    unread(a.sock)
    registry.write_expired("a")
    with pytest.raises(BrokenPipeError):
        a.sock.send(b"answer")
    assert registry.serving() == 1  # still counted once among the shed


def test_a_request_whose_body_is_read_when_its_connection_is_shed_is_its_last(pairs) -> None:
    """Its body already sent, it is answered: with ``Connection: close``, not as if the
    connection it is on could carry another."""
    registry = Connections(limits(cap=1))
    connect(pairs, registry, "a")
    request = Request()
    a = registry.start_request("a", request)
    assert a is not None and not request.must_close
    connect(pairs, registry, "b")
    assert a.shed and request.must_close


def test_nothing_is_shed_while_every_connection_is_being_answered(pairs) -> None:
    registry = Connections(limits(cap=2))
    for key in "ab":
        connect(pairs, registry, key)
        registry.enter(key, APP)
    c, _ = connect(pairs, registry, "c")
    assert c is not None and not any(conn.shed for conn in registry.live.values())


def test_one_address_holds_at_most_its_cap_and_trusted_proxies_are_exempt(pairs) -> None:
    registry = Connections(limits(cap=10, per_address=2))
    assert connect(pairs, registry, "a")[0] is not None
    assert connect(pairs, registry, "b")[0] is not None
    assert connect(pairs, registry, "c")[0] is None  # refused
    assert connect(pairs, registry, "d", "192.0.2.2")[0] is not None
    for key in "efg":
        assert connect(pairs, registry, key, "10.1.2.3")[0] is not None
    registry.close("a")
    assert connect(pairs, registry, "h")[0] is not None


@pytest.mark.parametrize("prefix", [64, 48, 128])
def test_ipv6_addresses_are_capped_by_their_prefix(pairs, prefix: int) -> None:
    """Addresses of one /64 (by default) share the cap: a host given a /64 has more addresses
    than anyone could cap one by one."""
    registry = Connections(replace(limits(cap=10, per_address=2), ipv6_prefix=prefix))
    assert connect(pairs, registry, "a", "2001:db8:1:2::1")[0] is not None
    assert connect(pairs, registry, "b", "2001:db8:1:2::ffff")[0] is not None
    same_64 = connect(pairs, registry, "c", "2001:db8:1:2:abcd::9")[0]
    other_64 = connect(pairs, registry, "d", "2001:db8:1:3::1")[0]
    other_48 = connect(pairs, registry, "e", "2001:db8:2::1")[0]
    assert (same_64 is None, other_64 is None, other_48 is None) == {
        64: (True, False, False),
        48: (True, True, False),
        128: (False, False, False),
    }[prefix]


def test_an_ipv4_mapped_address_is_its_ipv4_address(pairs) -> None:
    """A dual-stack socket reports an IPv4 peer as ``::ffff:a.b.c.d``: it shares the IPv4
    address's cap, and a trusted proxy is recognised either way."""
    registry = Connections(limits(cap=10, per_address=2))
    assert connect(pairs, registry, "a", "192.0.2.7")[0] is not None
    assert connect(pairs, registry, "b", "::ffff:192.0.2.7")[0] is not None
    assert connect(pairs, registry, "c", "::ffff:c000:207")[0] is None  # the same, refused
    for key in "defg":  # a trusted proxy (10.0.0.0/8) through a dual-stack socket: exempt
        conn = connect(pairs, registry, key, "::ffff:10.0.0.7")[0]
        assert conn is not None and not conn.capped
    listed_mapped = (ipaddress.ip_network("::ffff:10.9.0.0/120"),)
    assert is_trusted("::ffff:10.9.0.1", listed_mapped) and is_trusted("10.0.0.1", PROXY)
    assert not is_trusted("::ffff:10.9.1.1", listed_mapped)
    assert cap_key("::ffff:192.0.2.7", 64) == "192.0.2.7"
    assert cap_key("2001:db8::1", 64) == "2001:db8::/64"
    assert cap_key("not-an-address", 64) == "not-an-address"


@pytest.mark.parametrize(
    ("requests", "lifetime", "age", "closes_after"),
    [(3, 60.0, 0.0, 3), (100, 60.0, 61.0, 1), (1, 60.0, 0.0, 1)],
)
def test_a_connection_carries_bounded_requests_for_a_bounded_time(
    pairs, requests: int, lifetime: float, age: float, closes_after: int
) -> None:
    clock = Clock()
    registry = Connections(limits(requests=requests, lifetime=lifetime), clock)
    connect(pairs, registry, "a")
    clock.now = age
    closed = []
    for _ in range(closes_after):
        request = Request()
        registry.start_request("a", request)
        closed.append(request.must_close)
    assert closed == [False] * (closes_after - 1) + [True]


def test_a_rejection_closes_the_connection_after_its_answer(pairs) -> None:
    registry = Connections(limits())
    connect(pairs, registry, "a")
    request = Request()
    registry.start_request("a", request)
    registry.close_after("a")
    assert request.must_close


@pytest.mark.parametrize(
    ("remote", "forwarded", "client"),
    [
        ("192.0.2.9", "203.0.113.5", "192.0.2.9"),  # not a proxy: its header is ignored
        ("10.0.0.1", "203.0.113.5", "203.0.113.5"),
        ("10.0.0.1", "198.51.100.1, 203.0.113.5, 10.0.0.2", "203.0.113.5"),  # last untrusted
        ("10.0.0.1", "10.0.0.3", "10.0.0.1"),  # only proxies: the peer
        ("10.0.0.1", "not-an-address", "10.0.0.1"),
        ("10.0.0.1", None, "10.0.0.1"),
        ("10.0.0.1", " \u00e9, ", "10.0.0.1"),
        # IPv4-mapped (a dual-stack socket's peer, or a hop written that way): IPv4
        ("::ffff:10.0.0.1", "203.0.113.5", "203.0.113.5"),
        ("10.0.0.1", "203.0.113.5, ::ffff:10.0.0.2", "203.0.113.5"),
        ("10.0.0.1", "::ffff:203.0.113.5", "203.0.113.5"),
        ("::ffff:192.0.2.9", "203.0.113.5", "192.0.2.9"),
    ],
)
def test_x_forwarded_for_is_believed_only_from_trusted_proxies(
    remote: str, forwarded: str | None, client: str
) -> None:
    assert client_address(remote, forwarded, PROXY) == client
