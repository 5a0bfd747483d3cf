"""Receipts (:mod:`pgq_django.receipts`): ``"<msg_id>:<read_ct>"`` as text and back."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgq_django.exceptions import InvalidArgument
from pgq_django.receipts import Receipt
from pgq_django.validation import BIGINT_MAX


@given(st.integers(0, BIGINT_MAX), st.integers(0, 2**31 - 1))
@settings(database=None, max_examples=300, deadline=None)
def test_a_receipt_round_trips_through_its_text(msg_id: int, read_ct: int) -> None:
    receipt = Receipt(msg_id, read_ct)
    text = str(receipt)
    assert text == f"{msg_id}:{read_ct}"
    assert Receipt.parse(text) == receipt


@pytest.mark.parametrize(
    "text",
    [
        "",
        "12",
        "12:",
        ":3",
        "12:3:4",
        "a:b",
        "12;3",
        "1.0:2",
        None,
        12,
        # int() reads these, but str(receipt) never writes them: numbers are ASCII digits.
        "\u0661:\u0662",
        " 1:2",
        "+1:2",
        "1_0:2",
    ],
)
def test_text_that_is_not_two_integers_around_one_colon_is_refused(text) -> None:
    with pytest.raises(InvalidArgument) as caught:
        Receipt.parse(text)
    assert caught.value.message == (
        f"{text!r} is not a receipt that pgq_django issued: a receipt is "
        "'<msg_id>:<read_ct>', two whole numbers (the text of message.receipt)."
    )


def test_a_pasted_blob_is_not_echoed_whole() -> None:
    with pytest.raises(InvalidArgument) as caught:
        Receipt.parse("AQEB" + "x" * 500 + ":1:2")
    assert "x" * 100 not in caught.value.message
