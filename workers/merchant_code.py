"""An exception the merchant's own code raised that it did not mean to (a bug, not a
:class:`~workers.api.RetryLater` or :class:`~workers.api.GiveUp`), in a ``module:function``
action (workers/actions.py) or effect (workers/effects.py): the payment's error says
where, in one line (``KeyError: 'x' (at shop/actions.py:42 in grant)``: the innermost
frame of the merchant's code, neither the service's nor a library's it called), and the
worker's log gets its whole traceback at ERROR, its text masked as every error the service
logs is (ledger/redact.py)."""

import logging
import os
import sys
import sysconfig
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from ledger.redact import without

log = logging.getLogger("workers.actions")

_ROOT = Path(__file__).resolve().parent.parent
SERVICE = tuple(f"{_ROOT / name}{os.sep}" for name in ("ledger", "ledgerctl", "webhook", "workers"))
"""Where the service's own code is: its frames are never the merchant's."""
LIBRARIES = tuple(
    {
        str(Path(path).resolve()) + os.sep
        for name in ("stdlib", "platstdlib", "purelib", "platlib")
        if (path := sysconfig.get_paths().get(name))
    }
)
"""The standard library and installed packages: a merchant's code calls them."""


def unexpected(
    exc: BaseException, target: str, purchase: object, secrets: Sequence[str] = ()
) -> str:
    """The payment's error for ``exc``, raised by the code ``target`` names
    (``module:function``) while it handled ``purchase``, whose traceback this logs masked
    (``redact``, and ``secrets``: a database action's URL's password)."""
    where = raised_at(exc, target.partition(":")[0].partition(".")[0])
    error = f"{type(exc).__name__}: {exc}" + (f" (at {where})" if where else "")
    trace = "".join(traceback.format_exception(exc))
    fields = purchase if isinstance(purchase, dict) else vars_of(purchase)
    pk, token = fields.get("payment_key", "?"), fields.get("token", "?")
    said = without(f"{target} raised {error}\n{trace}", list(secrets))
    log.error("%s token %s: %s", pk, token, said)
    return error


def vars_of(purchase: object) -> dict[str, object]:
    return {name: getattr(purchase, name, "?") for name in ("payment_key", "token")}


def raised_at(exc: BaseException, package: str) -> str:
    """``path:line in function`` of the innermost frame of the merchant's code in ``exc``'s
    traceback: outside the service and the libraries, else in ``package`` (the merchant's
    code installed as a package), else outside the service; '' when none is."""
    steps = list(traceback.walk_tb(exc.__traceback__))
    theirs = [(f, line) for f, line in steps if not _file(f).startswith(SERVICE)]
    own = [(f, line) for f, line in theirs if not _library(f)]
    named = [(f, line) for f, line in theirs if _module(f).partition(".")[0] == package]
    found = own or named or theirs
    if not found:
        return ""
    frame, line = found[-1]
    return f"{shown_path(frame.f_code.co_filename)}:{line} in {frame.f_code.co_name}"


def shown_path(filename: str) -> str:
    """``filename`` relative to the ``sys.path`` entry it is under (``shop/actions.py``),
    else as it is."""
    path = str(Path(filename).resolve())
    roots = [str(Path(entry or os.getcwd()).resolve()) + os.sep for entry in sys.path]
    under = [root for root in roots if path.startswith(root)]
    return path[len(max(under, key=len)) :] if under else filename


def _file(frame: FrameType) -> str:
    return str(Path(frame.f_code.co_filename).resolve())


def _library(frame: FrameType) -> bool:
    """A library's code, or code without a file of its own (``<frozen …>``, ``<string>``)."""
    return frame.f_code.co_filename.startswith("<") or _file(frame).startswith(LIBRARIES)


def _module(frame: FrameType) -> str:
    return str(frame.f_globals.get("__name__", ""))
