"""A send whose commit happened but whose answer never arrived, retried under its key.

This is what a failover (or any lost connection) does to a send at the worst moment: the
server committed the message, and the connection died before the answer reached the
client, so the client cannot tell whether its message is stored. The tests make that
moment for real: the Django connection goes through :class:`AnswerCutter`, a TCP proxy in
front of the test server that lets every byte through until it sees a request carrying a
marker, then holds back the server's answer to it and, once that answer is complete
(CommandComplete, then ReadyForQuery: the statement ran and its transaction committed),
closes both sides instead of passing it on.

With a ``dedup_id`` (the idempotency key) the API retries on a new connection and finds
the message the lost attempt stored; a caller that sees ``ConnectionLost`` sends again with
the same key and gets the same msg_id. Without a key the send says the outcome is unknown,
and the message is indeed there: sending again would store it twice.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

import pgq_django as pgq
from pgq_django.exceptions import ConnectionLost, DatabaseUnavailable

pytestmark = pytest.mark.django_db(transaction=True)

_COMMAND_COMPLETE, _READY = ord("C"), ord("Z")


class AnswerCutter:
    """A TCP proxy to the test server that can lose the answer to a marked request.

    :meth:`cut` arms it: the next ``times`` requests whose bytes contain ``marker`` get no
    answer; their connections close once the server has finished answering (so whatever
    the request did has committed). A request's answer is cut only whole: a round trip
    that completes no command (a statement's preparation) passes through.
    """

    def __init__(self, upstream: tuple[int, Any]) -> None:
        self._upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._marker = b""
        self._armed = 0
        self._refuse_after_cut = False
        self.refusing = False
        self.cuts = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def cut(self, marker: str, times: int = 1, *, then_refuse: bool = False) -> None:
        """Arm it; ``then_refuse``: after the last cut, close every new connection at once
        (the server gone) until :meth:`accept_again`."""
        with self._lock:
            self._marker, self._armed = marker.encode(), times
            self._refuse_after_cut = then_refuse

    def accept_again(self) -> None:
        self.refusing = False

    def _cut_made(self) -> None:
        with self._lock:
            self.cuts += 1
            if self._refuse_after_cut and not self._armed:
                self.refusing = True

    def close(self) -> None:
        self._stopping.set()
        self._accepting.join(timeout=10)
        self._listener.close()

    def _take(self, data: bytes) -> bool:
        """Whether this request's answer is to be cut (one of the armed times)."""
        with self._lock:
            if self._armed and self._marker in data:
                self._armed -= 1
                return True
            return False

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _address = self._listener.accept()
            except TimeoutError:
                continue
            if self.refusing:
                client.close()
                continue
            server = socket.socket(self._upstream[0])
            server.connect(self._upstream[1])
            link = _Link(self, client, server)
            threading.Thread(target=link.requests, daemon=True).start()
            threading.Thread(target=link.answers, daemon=True).start()


class _Link:
    """One client connection and its server connection, pumped both ways."""

    def __init__(self, cutter: AnswerCutter, client: socket.socket, server: socket.socket):
        self.cutter, self.client, self.server = cutter, client, server
        self.cut_next = threading.Event()

    def requests(self) -> None:
        try:
            while data := self.client.recv(65536):
                # Marked before it leaves: the client waits for this request's answer
                # before sending another, so the answer begins the server's next bytes.
                if self.cutter._take(data):
                    self.cut_next.set()
                self.server.sendall(data)
        except OSError:
            pass
        self._close()

    def answers(self) -> None:
        held = b""
        try:
            while data := self.server.recv(65536):
                if not self.cut_next.is_set():
                    self.client.sendall(data)
                    continue
                held += data
                done, completed = _answer_end(held)
                if done is None:
                    continue
                if completed:
                    self.cutter._cut_made()
                    break  # committed, and the client never hears of it
                self.client.sendall(held[:done])
                held = held[done:]
        except OSError:
            pass
        self._close()

    def _close(self) -> None:
        for side in (self.client, self.server):
            with contextlib.suppress(OSError):
                side.shutdown(socket.SHUT_RDWR)
            side.close()


def _answer_end(held: bytes) -> tuple[int | None, bool]:
    """(the end of the first whole answer in ``held``, or None; whether it completed a
    command). An answer ends with ReadyForQuery; the server's messages are a type byte and
    a length that counts itself."""
    at, completed = 0, False
    while at + 5 <= len(held):
        kind, length = held[at], int.from_bytes(held[at + 1 : at + 5], "big")
        end = at + 1 + length
        if end > len(held):
            return None, False
        completed = completed or kind == _COMMAND_COMPLETE
        if kind == _READY:
            return end, completed
        at = end
    return None, False


def _upstream() -> tuple[int, Any]:
    """Where the test server listens, from the Django connection's settings."""
    host = connection.settings_dict["HOST"] or "/var/run/postgresql"
    port = int(connection.settings_dict["PORT"] or 5432)
    if host.startswith("/"):
        return socket.AF_UNIX, f"{host}/.s.PGSQL.{port}"
    return socket.AF_INET, (host, port)


@pytest.fixture
def cutter() -> Iterator[AnswerCutter]:
    """The Django connection of this thread, through an :class:`AnswerCutter`."""
    if "," in (connection.settings_dict["HOST"] or ""):
        pytest.fail("the test server's HOST names several hosts; point DATABASE_URL at one")
    proxy = AnswerCutter(_upstream())
    saved = connection.settings_dict["HOST"], connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["HOST"], connection.settings_dict["PORT"] = "127.0.0.1", proxy.port
    try:
        yield proxy
    finally:
        connection.close()
        connection.settings_dict["HOST"], connection.settings_dict["PORT"] = saved
        proxy.close()


def _stored(queue: str) -> list[tuple[int, Any]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT m.msg_id, m.message::text FROM pgq_message m"
            " JOIN pgq_queue q ON q.id = m.queue_id WHERE q.name = %s ORDER BY m.msg_id",
            [queue],
        )
        return [(msg_id, json.loads(body)) for msg_id, body in cursor.fetchall()]


@pytest.fixture
def orders() -> str:
    pgq.create_queue("idempotent_orders")
    return "idempotent_orders"


def test_a_keyed_send_whose_answer_is_lost_after_commit_is_retried_and_stored_once(
    cutter: AnswerCutter, orders: str
) -> None:
    cutter.cut("order-17")
    msg_id = pgq.send(orders, {"order": 17}, dedup_id="order-17")
    assert cutter.cuts == 1  # the first attempt committed and its answer was lost
    # The retry on a new connection found the first attempt's message, not a second one.
    assert _stored(orders) == [(msg_id, {"order": 17})]


def test_a_send_without_a_key_says_the_outcome_is_unknown_though_it_committed(
    cutter: AnswerCutter, orders: str
) -> None:
    cutter.cut("order-18")
    with pytest.raises(ConnectionLost) as lost:
        pgq.send(orders, {"order": 18, "ref": "order-18"})
    assert not isinstance(lost.value, DatabaseUnavailable)
    assert "unknown" in lost.value.message and "dedup_id" in lost.value.message
    assert cutter.cuts == 1
    # It had committed: sending it again without a key would store it twice.
    assert [body for _id, body in _stored(orders)] == [{"order": 18, "ref": "order-18"}]
    assert pgq.send(orders, {"order": 19}) > 0  # the next call has a working connection


def test_a_caller_that_sends_again_under_the_key_gets_the_first_msg_id(
    cutter: AnswerCutter, orders: str
) -> None:
    # Both the attempt and the API's own retry lose their answers (a failover under way):
    # the caller sees ConnectionLost, sends again with the same key, and gets the first id.
    cutter.cut("order-20", times=2)
    with pytest.raises(ConnectionLost) as lost:
        pgq.send(orders, {"order": 20}, dedup_id="order-20")
    assert "unknown" in lost.value.message
    assert cutter.cuts == 2
    first = _stored(orders)
    assert [body for _id, body in first] == [{"order": 20}]
    assert pgq.send(orders, {"order": 20}, dedup_id="order-20") == first[0][0]
    assert _stored(orders) == first


def test_a_keyed_send_whose_answer_is_lost_with_the_server_gone_is_sent_again_under_its_key(
    cutter: AnswerCutter, orders: str
) -> None:
    # A failover: the answer is lost, and the API's own retry finds no server to connect to.
    cutter.cut("order-22", then_refuse=True)
    with pytest.raises(DatabaseUnavailable) as down:
        pgq.send(orders, {"order": 22}, dedup_id="order-22")
    assert "unknown" in down.value.message and "same arguments" in down.value.message
    assert cutter.cuts == 1
    cutter.accept_again()  # a server takes writes again
    deadline = time.monotonic() + 30
    while True:  # as the caller does: the same send, until the outage's next round
        try:
            msg_id = pgq.send(orders, {"order": 22}, dedup_id="order-22")
            break
        except DatabaseUnavailable:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert _stored(orders) == [(msg_id, {"order": 22})]


def test_a_keyed_publish_whose_answer_is_lost_stores_one_copy_per_queue(
    cutter: AnswerCutter, orders: str
) -> None:
    pgq.create_queue("idempotent_audit")
    pgq.create_exchange("idempotent_events", type="fanout")
    pgq.bind_queue(orders, "idempotent_events")
    pgq.bind_queue("idempotent_audit", "idempotent_events")
    cutter.cut("event-21")
    ids = pgq.publish("idempotent_events", {"event": 21}, dedup_id="event-21")
    assert cutter.cuts == 1
    assert sorted(ids) == sorted(
        msg_id for queue in (orders, "idempotent_audit") for msg_id, _body in _stored(queue)
    )
    assert len(ids) == 2
