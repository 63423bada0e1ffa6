"""scripts/replay_events.py refuses an input it cannot send, or a report it could not write,
before sending anything: one line naming the file (and line) or the scenario, exit code 2
(a usage error), never a traceback."""

import random
from pathlib import Path

import pytest

from ledgerctl import takebacks
from ledgerctl.replay.main import collect, main
from ledgerctl.replay.options import parse_args
from tests.support.constants import SECRET

NOWHERE = "http://127.0.0.1:9/webhooks/stripe"
"""The discard port: nothing listens there, and nothing must be sent."""

EVENT = '{"id": "evt_1", "type": "payment_intent.created", "data": {"object": {}}}'


def refusal(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    with pytest.raises(SystemExit) as stopped:
        main(["--secret", SECRET, "--url", NOWHERE, "--quiet", *args])
    err = capsys.readouterr().err
    assert stopped.value.code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    ("name", "content", "said"),
    [
        ("not-json.json", "not json\n", "not-json.json: line 1: not JSON"),
        ("lines.jsonl", f"{EVENT}\n{{broken\n", "lines.jsonl: line 2: not JSON"),
        ("no-id.json", '{"x": 1}', "no-id.json: item 1 is not an event"),
        ("numbers.json", "[1, 2]", "numbers.json: item 1 is not an event"),
        ("latin1.json", b'{"id": "evt_\xe9"}', "latin1.json: not UTF-8"),
    ],
    ids=["not JSON", "a bad JSON line", "no id", "not objects", "not UTF-8"],
)
def test_an_event_file_it_cannot_send_is_named_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, content: str | bytes, said: str
) -> None:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    assert said in refusal(capsys, str(path))


def test_a_missing_event_file_is_named_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "evnets.json"
    assert f"{missing}: no such file or folder" in refusal(capsys, str(missing))


def test_an_unknown_scenario_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    said = refusal(capsys, "--scenario", "case-stduy")
    assert "unknown scenario 'case-stduy'" in said and "case-study" in said


def test_a_report_it_could_not_write_is_refused_before_anything_is_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    report = tmp_path / "a-file" / "run.json"
    said = refusal(capsys, "--scenario", "case-study", "--json", str(report))
    assert f"--json {report}: cannot write there" in said


def test_help_lists_every_refund_kind_it_accepts(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--help"])
    shown = " ".join(capsys.readouterr().out.split())  # unwrapped
    assert stopped.value.code == 0
    for kind in takebacks.KINDS + takebacks.OTHER_KINDS:
        assert f"{kind} (" in shown, kind


class NoLedger:
    def ping(self) -> bool:
        return True


def test_a_seeded_run_sends_the_same_bytes_again() -> None:
    """The storm scenario run twice with --seed 7: the second run's events are duplicates of
    the first's, not 2,400 conflicting copies (the same ids with a new ``created``: docs
    audit). Without a seed, events are made now."""

    def bodies(*argv: str) -> list[bytes]:
        args = parse_args(["--secret", SECRET, "--url", NOWHERE, *argv])
        seed = args.seed if args.seed is not None else 1
        return [body for _, body in collect(args, NoLedger(), random.Random(seed))]

    first = bodies("--scenario", "storm", "--seed", "7")
    assert first and first == bodies("--scenario", "storm", "--seed", "7")
    assert first != bodies("--scenario", "storm", "--seed", "8")
    assert b'"created": 17672' in first[0]  # 2026, from the seed
