"""The files of an evidence bundle as ``verify`` reads them: only plain file names inside the
bundle directory, only regular files (never a symlink, device or FIFO), and never more than
a size bound. Every refusal is a :class:`BundleFileError` whose message says why."""

import errno
import os
import re
import stat
from pathlib import Path

MANIFEST = "MANIFEST.sha256"
_LINE = re.compile(r"(?P<digest>[0-9a-f]{64}) [ *](?P<name>.+)")


class BundleFileError(Exception):
    """A file the verifier will not or cannot read."""


def parse_manifest(text: str) -> tuple[dict[str, str], list[str]]:
    """Listed name -> SHA-256, and one problem per malformed or repeated line."""
    listed: dict[str, str] = {}
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        match = _LINE.fullmatch(line)
        if match is None:
            problems.append(f"{MANIFEST} line {number} is not '<sha256>  <file name>'")
        elif match["name"] in listed:
            problems.append(f"{MANIFEST} lists {match['name']} twice")
        else:
            listed[match["name"]] = match["digest"]
    return listed, problems


def present(directory: Path) -> list[str]:
    """Every entry of the bundle directory but the manifest, whatever its kind."""
    return sorted(name for name in os.listdir(directory) if name != MANIFEST)


def read_bounded(directory: Path, name: str, max_bytes: int) -> bytes:
    """The bytes of the bundle file ``name``, if it is one and holds at most ``max_bytes``."""
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise BundleFileError(f"{name}: not a file name inside the bundle directory")
    try:  # no symlink followed; a FIFO does not block the open
        fd = os.open(directory / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise BundleFileError(f"{name}: missing from the bundle directory") from None
    except OSError as exc:
        why = "a symlink" if exc.errno == errno.ELOOP else f"unreadable ({exc.strerror})"
        raise BundleFileError(f"{name}: {why}, not a regular file of the bundle") from None
    try:
        return _read_regular(fd, name, max_bytes)
    finally:
        os.close(fd)


def _read_regular(fd: int, name: str, max_bytes: int) -> bytes:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise BundleFileError(f"{name}: not a regular file")
    if info.st_size > max_bytes:
        raise BundleFileError(f"{name}: larger than the {max_bytes}-byte limit")
    with os.fdopen(fd, "rb", closefd=False) as file:
        data = file.read(max_bytes + 1)  # it may have grown since fstat
    if len(data) > max_bytes:
        raise BundleFileError(f"{name}: larger than the {max_bytes}-byte limit")
    return data
