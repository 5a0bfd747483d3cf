"""The store's rules for what a send writes hold for the PGMQ functions too, checked on a
real psycopg connection as a PGMQ client makes them: reserved header keys and text XML
cannot carry are refused with a clear SQL error, and nothing is stored."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

import pgq_django as pgq
from tests.pgmq_support import ours_sql, pgmq_sql

__all__ = ["pgmq_sql"]  # the fixture, imported for the tests below

# Each spelling a PGMQ sender could use to steer a worker's reply or forge one.
RESERVED = ["pgq_reply_to", "pgq_correlation_id", "PGQ_Reply_To"]
# Characters SQS refuses (XML 1.0 cannot carry them), and the JSON spellings they take.
NOT_XML = ["\x01", "\x08", "\x0b", "\x0c", "\ufffe", "\uffff", "\\\x01"]


def _queue(made_by: str, queue_name: str) -> str:
    """A queue holding one message, made through the Python API (pgq_django's defaults:
    the general send path) or through pgmq.create (PGMQ's: the usual calls' own paths)."""
    if made_by == "pgq":
        pgq.create_queue(queue_name)
    else:
        ours_sql("SELECT pgmq.create(%s)", [queue_name])
    ours_sql("SELECT * FROM pgmq.send(%s, %s)", [queue_name, Jsonb({"kept": True})])
    return queue_name


def _stored(name: str) -> list[Any]:
    return [
        row[0]
        for row in ours_sql(
            "SELECT m.message FROM pgq_message m JOIN pgq_queue q ON q.id = m.queue_id "
            "WHERE q.name = %s ORDER BY m.msg_id",
            [name],
        )
    ]


SENDS_WITH_HEADERS = [
    "SELECT * FROM pgmq.send(%(q)s, %(msg)s, %(headers)s)",
    "SELECT * FROM pgmq.send(%(q)s, %(msg)s, %(headers)s, 0)",
    "SELECT * FROM pgmq.send(%(q)s, %(msg)s, %(headers)s, now())",
    "SELECT * FROM pgmq.send_batch(%(q)s, ARRAY[%(msg)s, %(msg)s], ARRAY[%(ok)s, %(headers)s])",
    "SELECT * FROM pgmq.send_batch(%(q)s, ARRAY[%(msg)s], ARRAY[%(headers)s], 0)",
]


@pytest.mark.parametrize("header", RESERVED)
@pytest.mark.parametrize("statement", SENDS_WITH_HEADERS)
@pytest.mark.parametrize("made_by", ["pgq", "pgmq"])
def test_pgmq_send_refuses_reserved_headers_and_stores_nothing(
    pgmq_sql: str, queue_name: str, header: str, statement: str, made_by: str
) -> None:
    name = _queue(made_by, queue_name)
    params = {
        "q": name,
        "msg": Jsonb({"task": 1}),
        "ok": Jsonb({"x-trace": "a"}),
        "headers": Jsonb({"x-pgmq-group": "g", header: "attacker_replies"}),
    }
    with pytest.raises(psycopg.errors.InvalidParameterValue) as refused:
        ours_sql(statement, params)
    assert header in str(refused.value) and "reserved" in str(refused.value)
    assert _stored(name) == [{"kept": True}]


def test_pgmq_send_topic_refuses_reserved_headers(pgmq_sql: str, queue_name: str) -> None:
    name = _queue("pgmq", queue_name)
    ours_sql("SELECT pgmq.bind_topic(%s, %s)", [name + ".#", name])
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        ours_sql(
            "SELECT pgmq.send_topic(%s, %s, %s, 0)",
            [name + ".x", Jsonb({"task": 1}), Jsonb({"pgq_reply_to": "mine"})],
        )
    assert _stored(name) == [{"kept": True}]


def test_pgmq_send_keeps_ordinary_headers(pgmq_sql: str, queue_name: str) -> None:
    name = _queue("pgmq", queue_name)
    ours_sql("SELECT * FROM pgmq.send(%s, %s, %s)", [name, Jsonb(1), Jsonb({"pgq": "x", "p": 1})])
    assert ours_sql("SELECT headers FROM pgmq.read(%s, 30, 5) ORDER BY msg_id", [name]) == [
        (None,),
        ({"pgq": "x", "p": 1},),
    ]


SENDS = [
    "SELECT * FROM pgmq.send(%(q)s, %(msg)s)",
    "SELECT * FROM pgmq.send(%(q)s, %(msg)s, 0)",
    "SELECT * FROM pgmq.send(%(q)s, %(ok)s, %(headers)s)",
    "SELECT * FROM pgmq.send_batch(%(q)s, ARRAY[%(ok)s, %(msg)s])",
    "SELECT * FROM pgmq.send_batch(%(q)s, ARRAY[%(ok)s, %(msg)s], 0)",
    "SELECT * FROM pgmq.send_batch(%(q)s, ARRAY[%(ok)s, %(ok)s], ARRAY[NULL, %(headers)s])",
]


@pytest.mark.parametrize("char", NOT_XML)
@pytest.mark.parametrize("statement", SENDS)
@pytest.mark.parametrize("made_by", ["pgq", "pgmq"])
def test_pgmq_send_refuses_text_xml_cannot_carry(
    pgmq_sql: str, queue_name: str, char: str, statement: str, made_by: str
) -> None:
    name = _queue(made_by, queue_name)
    params = {
        "q": name,
        "msg": Jsonb({"text": f"a{char}b"}),
        "ok": Jsonb({"text": "fine \\b \\u0001 \t\n\r \ud7ff \U0001fffe"}),
        "headers": Jsonb({"note": f"a{char}b"}),
    }
    with pytest.raises(psycopg.errors.CharacterNotInRepertoire) as refused:
        ours_sql(statement, params)
    assert "XML" in str(refused.value)
    assert _stored(name) == [{"kept": True}]


def test_pgmq_send_keeps_text_that_only_looks_like_an_escape(
    pgmq_sql: str, queue_name: str
) -> None:
    name = _queue("pgmq", queue_name)
    # U+FFC0 to U+FFFD share their first two UTF-8 bytes with U+FFFE and U+FFFF, which the
    # functions look for before they match the pattern
    body = {"path": "C:\\b\\f\\u0001", "tab": "\t", "e": "\ue000\uffc0\uffe0\ufffd"}
    ours_sql("SELECT * FROM pgmq.send_batch(%s, ARRAY[%s, %s])", [name, Jsonb(body), Jsonb(2)])
    ours_sql("SELECT * FROM pgmq.send(%s, %s)", [name, Jsonb(body)])
    assert _stored(name) == [{"kept": True}, body, 2, body]
