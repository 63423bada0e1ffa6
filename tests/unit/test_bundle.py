"""``webhook-ledger verify`` passes only a whole, self-consistent bundle: every file listed
with its hash, every relation checked on every file present, and nothing read from outside
the bundle directory, from a non-regular file, or past a size bound; ``export`` names what
it cannot write, never with a traceback."""

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import limits
from ledgerctl.bundle import MANIFEST, OPTIONAL, REQUIRED, verify
from tests.support.helpers import cli_ok, run_cli

PAYLOAD = '{"id": "evt_1", "type": "payment_intent.succeeded"}'
GOOD: dict[str, Any] = {
    "counters.json": {
        "stats": {"deliveries": 2, "events": 1, "rejected": 1, "rejected:signature_mismatch": 1},
        "payments_by_state": {"fulfilled": 1},
    },
    "events.json": [
        {
            "id": "evt_1",
            "deliveries": 2,
            "payment_key": "pi_1",
            "pays": True,
            "origin": "webhook",
            "payload": PAYLOAD,
            "payload_sha256": hashlib.sha256(PAYLOAD.encode()).hexdigest(),
        }
    ],
    "payments.json": [
        {
            "payment_key": "pi_1",
            "state": "fulfilled",
            "events": [{"id": "evt_1", "type": "payment_intent.succeeded"}],
            "paid_by": "evt_1",
        }
    ],
    "rejections.json": [{"reason": "signature_mismatch", "status": 400}],
    "downstream_calls.json": [{"payment_key": "pi_1", "outcome": "applied"}],
    "downstream_orders.json": [{"payment_key": "pi_1", "idempotency_key": "fulfil:pi_1"}],
}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_bundle(directory: Path, files: dict[str, Any] = GOOD, listed: bool = True) -> Path:
    """Write ``files`` as JSON and a manifest listing them (an empty one unless ``listed``)."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = []
    for name, data in files.items():
        raw = json.dumps(data).encode()
        (directory / name).write_bytes(raw)
        lines.append(f"{sha(raw)}  {name}\n")
    (directory / MANIFEST).write_text("".join(lines) if listed else "")
    return directory


def list_also(bundle: Path, name: str, digest: str = "0" * 64) -> None:
    with open(bundle / MANIFEST, "a") as manifest:
        manifest.write(f"{digest}  {name}\n")


def cli_verify(bundle: Path, *options: str) -> Result:
    return run_cli({}, "verify", str(bundle), *options)


def test_a_whole_consistent_bundle_passes(tmp_path: Path) -> None:
    result = verify(make_bundle(tmp_path / "b"))
    assert result.failures == [] and result.passed > 10


def test_empty_manifest_and_unlisted_double_effect_fail(tmp_path: Path) -> None:
    """The issue's bundle: an empty manifest and an unlisted downstream_orders.json holding
    two effects for one payment verified as "2 assertions passed, 0 failed", exit 0."""
    orders = [{"payment_key": "pi_1", "idempotency_key": k} for k in ("a", "b")]
    bundle = make_bundle(tmp_path / "b", {**GOOD, "downstream_orders.json": orders}, False)
    result = cli_verify(bundle)
    assert cli_ok(result, 1)
    for name in GOOD:
        assert f"FAIL {name}: in the bundle but not listed in {MANIFEST}" in result.stdout
    assert "FAIL payment pi_1 has 2 effects" in result.stdout
    assert "FAIL payment pi_1: 1 applied calls, 2 effects" in result.stdout


def test_an_unlisted_file_fails_even_with_a_full_manifest(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path / "b")
    (bundle / "notes.txt").write_text("added later")
    assert verify(bundle).failures == [f"notes.txt: in the bundle but not listed in {MANIFEST}"]


def test_relations_run_on_a_file_whose_hash_fails(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path / "b")
    orders = GOOD["downstream_orders.json"] * 2
    (bundle / "downstream_orders.json").write_text(json.dumps(orders))
    failures = verify(bundle).failures
    assert "downstream_orders.json: hash does not match the manifest" in failures
    assert "payment pi_1 has 2 effects" in failures


def outside_file(tmp_path: Path) -> tuple[str, str]:
    """A file next to the bundle, listed with its true hash (the old code passed it)."""
    target = tmp_path / "outside.json"
    target.write_text("[]")
    return "../outside.json", sha(target.read_bytes())


def symlink_to(target: str) -> Any:
    def make(tmp_path: Path) -> tuple[str, str]:
        (tmp_path / "b" / "link.json").symlink_to(target)
        return "link.json", "0" * 64

    return make


def fifo(tmp_path: Path) -> tuple[str, str]:
    os.mkfifo(tmp_path / "b" / "pipe.json")
    return "pipe.json", "0" * 64


def subdirectory(tmp_path: Path) -> tuple[str, str]:
    (tmp_path / "b" / "sub").mkdir()
    (tmp_path / "b" / "sub" / "x.json").write_text("[]")
    return "sub/x.json", sha(b"[]")


def sparse_over_the_bound(tmp_path: Path) -> tuple[str, str]:
    with open(tmp_path / "b" / "huge.json", "wb") as huge:
        huge.truncate(limits.BUNDLE_MAX_FILE_BYTES + 1)  # sparse: no disk, no read
    return "huge.json", "0" * 64


def host_file(path: str) -> Any:
    return lambda tmp_path: (path, sha(Path(path).read_bytes()) if Path(path).is_file() else "0")


# Manifest names that must not be followed, each with the failure it must give.
HOSTILE_NAMES = {
    "absolute path (/etc/hostname, true hash)": (
        host_file("/etc/hostname"),
        "not a file name inside",
    ),
    "absolute path (/etc/passwd, true hash)": (host_file("/etc/passwd"), "not a file name"),
    "traversal (../../../../etc/passwd)": (
        lambda _: ("../../../../etc/passwd", "0" * 64),
        "not a file name inside",
    ),
    "traversal to a neighbour (true hash)": (outside_file, "not a file name inside"),
    "device (/dev/zero)": (lambda _: ("/dev/zero", "0" * 64), "not a file name inside"),
    "symlink to /dev/zero": (symlink_to("/dev/zero"), "link.json: a symlink"),
    "symlink to /etc/passwd": (symlink_to("/etc/passwd"), "link.json: a symlink"),
    "symlink to a bundle file": (symlink_to("events.json"), "link.json: a symlink"),
    "FIFO": (fifo, "pipe.json: not a regular file"),
    "path into a subdirectory": (subdirectory, "sub/x.json: not a file name inside"),
    "the directory itself (.)": (lambda _: (".", "0" * 64), ".: not a file name inside"),
    "the parent (..)": (lambda _: ("..", "0" * 64), "..: not a file name inside"),
    "NUL in the name": (lambda _: ("a\0b", "0" * 64), "not a file name inside"),
    "listed but missing": (lambda _: ("gone.json", "0" * 64), "gone.json: missing"),
    "file over the size bound (sparse)": (sparse_over_the_bound, "huge.json: larger than"),
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", HOSTILE_NAMES.values(), ids=list(HOSTILE_NAMES))
def test_manifest_names_stay_inside_the_bundle(tmp_path: Path, case: tuple[Any, str]) -> None:
    make_name, expected = case
    bundle = make_bundle(tmp_path / "b")
    name, digest = make_name(tmp_path)
    list_also(bundle, name, digest)
    failures = verify(bundle).failures
    assert failures and any(expected in f for f in failures), failures


@pytest.mark.timeout(30)
def test_a_hostile_manifest_is_a_failure_never_a_traceback(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path / "b")
    list_also(bundle, "/dev/zero")
    list_also(bundle, "../../../../etc/passwd")
    result = cli_verify(bundle)
    assert cli_ok(result, 1) and result.stderr == ""
    assert "FAIL /dev/zero: not a file name inside the bundle directory" in result.stdout


def test_the_size_bound_is_an_option(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path / "b")
    raw = b" " * (2 * 2**20)  # 2 MiB of JSON whitespace
    (bundle / "big.json").write_bytes(raw)
    list_also(bundle, "big.json", sha(raw))
    assert cli_ok(cli_verify(bundle))
    bounded = cli_verify(bundle, "--max-file-mb", "1")
    assert cli_ok(bounded, 1)
    assert "FAIL big.json: larger than the 1048576-byte limit" in bounded.stdout


# The manifest itself, and file contents that are not what export writes.
BAD_MANIFESTS = {
    "missing": (lambda b: (b / MANIFEST).unlink(), "MANIFEST.sha256: missing"),
    "symlink to /dev/zero": (
        lambda b: ((b / MANIFEST).unlink(), (b / MANIFEST).symlink_to("/dev/zero")),
        "MANIFEST.sha256: a symlink",
    ),
    "not UTF-8": (lambda b: (b / MANIFEST).write_bytes(b"\xff\xfe"), "not UTF-8"),
    "malformed line": (lambda b: list_also(b, "", "xyz"), "line 7 is not"),
    "a name listed twice": (lambda b: list_also(b, "events.json"), "lists events.json twice"),
}


@pytest.mark.parametrize("case", BAD_MANIFESTS.values(), ids=list(BAD_MANIFESTS))
def test_a_bad_manifest_fails(tmp_path: Path, case: tuple[Any, str]) -> None:
    spoil, expected = case
    bundle = make_bundle(tmp_path / "b")
    spoil(bundle)
    failures = verify(bundle).failures
    assert any(expected in f for f in failures), failures


BAD_CONTENTS = {
    "not JSON": ("events.json", b"{", "events.json: not JSON"),
    "nested 100,000 deep": ("events.json", b"[" * 100_000, "events.json: not JSON"),
    "object for a list": ("events.json", b"{}", "events.json: not a JSON array"),
    "record without a payload": ("events.json", b'[{"id": "evt_1"}]', "KeyError"),
    "payload not a string": (
        "events.json",
        b'[{"id": "e", "payload": 1, "payload_sha256": "", "deliveries": 1}]',
        "AttributeError",
    ),
    "list for counters": ("counters.json", b"[]", "counters.json: not a JSON object"),
    "scalar records": ("payments.json", b"[1, 2]", "payments.json: records not as"),
    "huge number of deliveries": (
        "events.json",
        json.dumps([{**GOOD["events.json"][0], "deliveries": "9" * 5000}]).encode(),
        "ValueError",
    ),
    "unhashable payment key": ("downstream_orders.json", b'[{"payment_key": []}]', "TypeError"),
    "a required file missing": ("payments.json", None, "payments.json: missing"),
}


@pytest.mark.parametrize("case", BAD_CONTENTS.values(), ids=list(BAD_CONTENTS))
def test_contents_not_as_export_writes_them_fail(tmp_path: Path, case: tuple) -> None:
    name, raw, expected = case
    files = {k: v for k, v in GOOD.items() if k != name}
    bundle = make_bundle(tmp_path / "b", files)
    if raw is not None:
        (bundle / name).write_bytes(raw)
        list_also(bundle, name, sha(raw))
    failures = verify(bundle).failures
    assert any(expected in f for f in failures), failures


names = st.one_of(
    st.sampled_from([*REQUIRED, *OPTIONAL]),
    st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=20).map(str.strip),
)
contents = st.one_of(
    st.binary(max_size=200),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
        max_leaves=20,
    ).map(lambda v: json.dumps(v).encode()),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    files=st.dictionaries(names, contents, max_size=8),
    manifest=st.text(max_size=300),
    extra_lines=st.lists(names, max_size=4),
)
def test_any_bundle_is_verified_without_a_traceback(
    tmp_path_factory: pytest.TempPathFactory,
    files: dict[str, bytes],
    manifest: str,
    extra_lines: list[str],
) -> None:
    bundle = tmp_path_factory.mktemp("fuzz")
    written = set()
    for name, raw in files.items():
        if name and "/" not in name and "\0" not in name and name not in (".", "..", MANIFEST):
            (bundle / name).write_bytes(raw)
            written.add(name)
    lines = [manifest, *(f"{'0' * 64}  {name}" for name in extra_lines)]
    (bundle / MANIFEST).write_text("\n".join(lines), errors="surrogatepass")
    result = verify(bundle)
    assert result.failures  # nothing here is a whole, consistent bundle
    listed_names = {line[66:] for line in "\n".join(lines).splitlines() if len(line) > 66}
    for name in written - listed_names:
        assert f"{name}: in the bundle but not listed in {MANIFEST}" in result.failures


@pytest.mark.parametrize(
    ("directory", "unwritable"),
    [("under-a-file/bundle", "under-a-file/bundle"), ("taken", "taken/events.json")],
    ids=["a parent that is a file", "a bundle file's name taken by a folder"],
)
def test_export_where_it_cannot_write_says_so_never_a_traceback(
    config, redis, tmp_path: Path, directory: str, unwritable: str
) -> None:
    (tmp_path / "under-a-file").write_text("not a folder")
    (tmp_path / "taken" / "events.json").mkdir(parents=True)
    exported = run_cli(config, "export", str(tmp_path / directory))
    assert cli_ok(exported, 2), exported.output
    assert f"cannot write {tmp_path / unwritable}" in exported.output
