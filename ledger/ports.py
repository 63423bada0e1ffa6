"""Whether an address can be listened on, asked before a process starts: the web process's
master (gunicorn.conf.py) and scripts/run.sh (ledgerctl/local_guard.py) refuse a taken port
with one line instead of failing later, or retrying for ever."""

import socket


def port_in_use(bind: str) -> str | None:
    """Why a process cannot listen at ``bind`` (host:port), or None when it can (or
    when ``bind`` is not host:port, such as a unix socket: gunicorn then says).

    With a socket per worker gunicorn's master never binds, and a worker that cannot bind
    retries for 5 s, exits and is forked again, for ever: the master asks once, up front.
    """
    host, _, port = bind.rpartition(":")
    if not (host and port.isdigit()):
        return None
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host.strip("[]"), int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn binds
            probe.bind(address)
    except OSError as exc:
        return f"cannot listen on {bind}: {exc.strerror or exc}"
    return None
