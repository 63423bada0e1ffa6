"""A script's array reply read by name (ledger/replies.py): values decoded, nil fields at
their defaults, and a reply of another length refused rather than misread."""

import pytest

from ledger import replies


def test_a_reply_is_read_by_name_with_defaults_for_nil_fields() -> None:
    skip = replies.read(replies.Start, [b"skip", 0, b"leased", None, None, None, None])
    assert skip == replies.Start("skip", reason="leased")
    go = replies.read(replies.Start, [b"go", 3, None, b"2000", b"usd", b"1", b"evt_1 evt_2"])
    assert (go.token, go.amount, go.events) == (3, "2000", "evt_1 evt_2")
    admission = replies.read(replies.Admission, [b"go", 1, None, None, None, None])
    assert admission.probe and not admission.dirty
    recorded = replies.read(replies.Recorded, [2, 1, 0, 0, b"queued", b"pi_1"])
    assert recorded == replies.Recorded(2, True, False, False, "queued", "pi_1")


def test_a_reply_of_another_length_is_refused() -> None:
    with pytest.raises(ValueError):
        replies.read(replies.Finished, [b"fulfilled"])
