"""Reading an SQS request before anything runs: typed parameters, queue URLs and ARNs,
pagination tokens, batch rules, and the error shapes SDKs read (:mod:`pgq_django.sqs.params`,
:mod:`.batches`, :mod:`.errors`). Each refusal is the SQS error code an SDK would get."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgq_django import exceptions
from pgq_django.sqs.auth import Caller
from pgq_django.sqs.batches import batch_entries
from pgq_django.sqs.errors import (
    ERRORS,
    FIXED_MESSAGES,
    PGQ_ERROR_CODES,
    SqsError,
    from_pgq_error,
    sqs_code,
)
from pgq_django.sqs.params import (
    Call,
    decode_token,
    encode_token,
    queue_name_from_arn,
    queue_name_from_url,
)

QUICK = settings(database=None, max_examples=200, deadline=None)
ACCOUNT = "000000000000"


def call(**params: Any) -> Call:
    return Call(
        action="Test",
        params=params,
        caller=Caller(key_id="AKID", user=None, region="eu-west-1"),
        endpoint_url=lambda: "https://sqs.example.test/",
    )


def code_of(func, *args, **kwargs) -> str:
    with pytest.raises(SqsError) as caught:
        func(*args, **kwargs)
    return caught.value.code


# -- typed parameters -----------------------------------------------------------------------


def test_a_missing_required_parameter_is_missing_parameter_naming_it() -> None:
    with pytest.raises(SqsError) as caught:
        call().string("QueueUrl", required=True)
    assert caught.value.code == "MissingParameter"
    assert caught.value.message == "The request must contain the parameter QueueUrl."
    assert call().string("QueueUrl") is None
    assert call().integer("MaxNumberOfMessages", 1, 10) is None


@pytest.mark.parametrize("value", [True, 1.0, "5", 0, 11, None])
def test_integer_parameters_are_json_integers_within_their_bounds(value) -> None:
    request = call(MaxNumberOfMessages=value)
    if value is None:
        assert request.integer("MaxNumberOfMessages", 1, 10) is None
        return
    with pytest.raises(SqsError) as caught:
        request.integer("MaxNumberOfMessages", 1, 10)
    assert caught.value.code == "InvalidParameterValue"
    assert "must be an integer between 1 and 10" in caught.value.message


def test_integer_parameters_accept_their_bounds() -> None:
    assert call(Wait=0).integer("Wait", 0, 20) == 0
    assert call(Wait=20).integer("Wait", 0, 20) == 20


@pytest.mark.parametrize(
    ("method", "value"),
    [
        ("string", 5),
        ("string", "x" * 1025),
        ("strings", "All"),
        ("strings", ["All", 1]),
        ("strings", ["x" * 1025]),
        ("string_map", ["a"]),
        ("string_map", {"a": 1}),
        ("entries", {"Id": "1"}),
        ("entries", ["not an entry"]),
    ],
)
def test_parameters_of_the_wrong_shape_are_invalid_parameter_values(method, value) -> None:
    assert code_of(getattr(call(P=value), method), "P") == "InvalidParameterValue"


@pytest.mark.parametrize(
    ("method", "value"),
    [("string", "a\x00b"), ("strings", ["ok", "\x00"]), ("string_map", {"k\x00": "v"}),
     ("string_map", {"k": "\ufffe"})],
)  # fmt: skip
def test_characters_sqs_forbids_are_refused_in_any_string_parameter(method, value) -> None:
    with pytest.raises(SqsError) as caught:
        getattr(call(P=value), method)("P")
    assert caught.value.code == "InvalidParameterValue"
    assert "is not an allowed character" in caught.value.message


def test_absent_lists_and_maps_read_as_empty_but_absent_entries_are_missing() -> None:
    assert call().strings("AttributeNames") == []
    assert call().string_map("Tags") == {}
    assert code_of(call().string_map, "Tags", required=True) == "MissingParameter"
    assert code_of(call().entries) == "MissingParameter"


def test_queue_urls_and_arns_use_the_endpoint_the_account_and_the_signing_region() -> None:
    request = call()
    assert request.queue_url("jobs") == f"https://sqs.example.test/{ACCOUNT}/jobs"
    assert request.queue_arn("jobs.fifo") == f"arn:aws:sqs:eu-west-1:{ACCOUNT}:jobs.fifo"
    assert call(QueueUrl=request.queue_url("jobs")).queue_name() == "jobs"


# -- queue URLs and ARNs --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "name"),
    [
        (f"http://127.0.0.1:8000/{ACCOUNT}/q", "q"),
        (f"https://sqs.example.test/sqs/{ACCOUNT}/q.fifo", "q.fifo"),  # endpoint under a prefix
        (f"https://h/{ACCOUNT}/q/", "q"),
        (f"https://h/{ACCOUNT}/q?x=1", "q"),
        ("q", "q"),  # a bare queue name, as SQS accepts it
        ("q.fifo", "q.fifo"),
    ],
)
def test_a_queue_url_names_its_last_path_segment(url: str, name: str) -> None:
    assert queue_name_from_url(url, ACCOUNT) == name


@pytest.mark.parametrize(
    ("url", "code"),
    [
        (f"ftp://h/{ACCOUNT}/q", "AWS.SimpleQueueService.NonExistentQueue"),
        ("http://h/q", "AWS.SimpleQueueService.NonExistentQueue"),
        ("not a url", "AWS.SimpleQueueService.NonExistentQueue"),
        (f"http://[::1/{ACCOUNT}/q", "AWS.SimpleQueueService.NonExistentQueue"),  # not a URL
        ("http://h/111111111111/q", "AWS.SimpleQueueService.NonExistentQueue"),
        (f"http://h/{ACCOUNT}/bad%20name", "AWS.SimpleQueueService.NonExistentQueue"),
        (f"http://h/{ACCOUNT}/" + "q" * 81, "AWS.SimpleQueueService.NonExistentQueue"),
    ],
)
def test_a_queue_url_elsewhere_or_naming_no_possible_queue_is_refused(url, code) -> None:
    assert code_of(queue_name_from_url, url, ACCOUNT) == code


@pytest.mark.parametrize(
    ("arn", "name"),
    [
        (f"arn:aws:sqs:us-east-1:{ACCOUNT}:dlq", "dlq"),
        (f"arn:aws-cn:sqs:cn-north-1:{ACCOUNT}:dlq.fifo", "dlq.fifo"),
        (f"arn:aws:sqs::{ACCOUNT}:dlq", "dlq"),  # the region is not checked
    ],
)
def test_an_sqs_arn_names_its_queue_in_any_partition_and_region(arn: str, name: str) -> None:
    assert queue_name_from_arn(arn, "RedrivePolicy", ACCOUNT) == name


@pytest.mark.parametrize(
    ("arn", "code"),
    [
        (f"arn:aws:sns:us-east-1:{ACCOUNT}:dlq", "InvalidParameterValue"),
        (f"arn:aws:sqs:us-east-1:{ACCOUNT}:bad name", "InvalidParameterValue"),
        (f"arn:aws:sqs:us-east-1:{ACCOUNT}:a/b", "InvalidParameterValue"),
        ("arn:aws:sqs:us-east-1::dlq", "InvalidParameterValue"),
        ("arn:aws:sqs:us-east-1:\u0661\u0662:dlq", "InvalidParameterValue"),
        (None, "InvalidParameterValue"),
        ("arn:aws:sqs:us-east-1:123456789012:dlq", "ResourceNotFoundException"),
    ],
)
def test_arns_of_other_services_names_or_accounts_are_refused(arn, code: str) -> None:
    assert code_of(queue_name_from_arn, arn, "RedrivePolicy", ACCOUNT) == code


# -- pagination tokens ----------------------------------------------------------------------


@given(st.text("abcXYZ019_-", min_size=1, max_size=80), st.booleans())
@QUICK
def test_a_next_token_round_trips_every_queue_name(name: str, fifo: bool) -> None:
    name += ".fifo" if fifo else ""
    token = encode_token(name)
    assert decode_token(token) == name
    assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=")


@pytest.mark.parametrize(
    "token", ["!!!", "YWJ", encode_token("../etc"), encode_token("a b"), encode_token(""), "/w=="]
)
def test_a_next_token_that_names_no_possible_queue_is_refused(token: str) -> None:
    with pytest.raises(SqsError) as caught:
        decode_token(token)
    assert caught.value.code == "InvalidParameterValue"
    assert caught.value.message == "Invalid NextToken value."


def test_no_next_token_means_the_first_page() -> None:
    assert decode_token(None) is None


# -- batches --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entries", "code"),
    [
        ([], "AWS.SimpleQueueService.EmptyBatchRequest"),
        (
            [{"Id": str(i)} for i in range(11)],
            "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
        ),
        ([{"Id": "a"}, {"Id": "a"}], "AWS.SimpleQueueService.BatchEntryIdsNotDistinct"),
        ([{"Id": "a.b"}], "AWS.SimpleQueueService.InvalidBatchEntryId"),
        ([{"Id": "x" * 81}], "AWS.SimpleQueueService.InvalidBatchEntryId"),
        ([{"Id": 1}], "AWS.SimpleQueueService.InvalidBatchEntryId"),
        ([{}], "AWS.SimpleQueueService.InvalidBatchEntryId"),
    ],
)
def test_a_batch_breaking_the_shared_rules_is_refused_whole(entries, code: str) -> None:
    assert code_of(batch_entries, call(Entries=entries)) == code


def test_ten_distinct_well_formed_entries_are_a_batch_and_ids_are_case_sensitive() -> None:
    entries = [{"Id": f"e-{i}_x"} for i in range(9)] + [{"Id": "E-0_x"}]
    assert batch_entries(call(Entries=entries)) == entries


# -- error shapes ---------------------------------------------------------------------------


def test_a_modelled_error_carries_its_shape_and_the_query_code_header() -> None:
    error = SqsError("AWS.SimpleQueueService.NonExistentQueue", "gone")
    assert error.as_body() == {"__type": "com.amazonaws.sqs#QueueDoesNotExist", "message": "gone"}
    assert error.query_error_header() == "AWS.SimpleQueueService.NonExistentQueue;Sender"
    assert error.status == 400


def test_a_common_error_is_typed_by_its_own_code_and_a_500_is_the_receivers_fault() -> None:
    denied = SqsError("AccessDenied", "no")
    assert denied.type_name == "com.amazon.coral.service#AccessDenied"
    assert (denied.status, denied.sender_fault) == (403, True)
    internal = SqsError("InternalError", "boom")
    assert internal.query_error_header() == "InternalError;Receiver"
    assert internal.as_batch_entry("e1") == {
        "Id": "e1",
        "SenderFault": False,
        "Code": "InternalError",
        "Message": "boom",
    }


def test_an_unknown_sqs_error_code_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown SQS error code 'NoSuchCode'"):
        SqsError("NoSuchCode", "x")


@pytest.mark.parametrize(
    "error_class",
    [
        cls
        for cls in vars(exceptions).values()
        if isinstance(cls, type) and issubclass(cls, exceptions.PgqError)
    ],
)
def test_every_pgq_error_becomes_an_sqs_error_with_a_known_code(error_class) -> None:
    translated = from_pgq_error(error_class("why"))
    assert translated.code in ERRORS
    # SQS's own words where it has fixed ones ("The specified queue does not exist.").
    assert translated.message == FIXED_MESSAGES.get(translated.code, "why")
    if sqs_code(error_class) in ERRORS:
        assert translated.code == sqs_code(error_class)
    else:
        assert translated.code == "InvalidParameterValue"


def test_sqs_codes_live_in_the_endpoint_s_table_not_on_the_core_errors() -> None:
    """The core exceptions carry no SQS code; the endpoint's one table names each, every
    code in it is one the endpoint answers, and a subclass takes its nearest listed
    ancestor's code (or the default)."""
    assert not any(hasattr(cls, "sqs_code") for cls in vars(exceptions).values())
    assert set(PGQ_ERROR_CODES.values()) <= set(ERRORS)

    class Renamed(exceptions.QueueNotFound):
        pass

    assert sqs_code(Renamed("gone")) == "AWS.SimpleQueueService.NonExistentQueue"
    assert sqs_code(exceptions.MessageTooLarge) == "InvalidParameterValue"
    assert sqs_code(exceptions.ConnectionLost()) == "InvalidParameterValue"
    assert sqs_code(exceptions.NotMigrated()) == "InternalError"
