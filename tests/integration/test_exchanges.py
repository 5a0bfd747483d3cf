"""Exchanges: creation, binding, routing for every type, publishing, dropping."""

from __future__ import annotations

import itertools
import uuid

import pytest
from django.db import connection, transaction

import pgq_django as pgq
from pgq_django.models import Binding, Exchange, Message, QueueCounter
from pgq_django.routing import topic_regex, topic_subject


def _name(prefix: str = "x") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def exchange_of(db):
    def make(type: str = "fanout") -> Exchange:
        return pgq.create_exchange(_name(), type)

    return make


def _bodies(queue) -> list:
    return [m.message for m in Message.objects.filter(queue__name=queue.name)]


# -- creating and dropping --------------------------------------------------------------------


def test_create_exchange_defaults_to_fanout(db):
    x = pgq.create_exchange("events")
    assert (x.name, x.type) == ("events", "fanout")
    assert pgq.get_exchange("events").pk == x.pk


@pytest.mark.parametrize("name", ["", "has space", "x" * 81, None, "a.b"])
def test_bad_exchange_names_raise_invalid_name(db, name):
    with pytest.raises(pgq.InvalidName):
        pgq.create_exchange(name)
    assert not Exchange.objects.exists()


def test_unknown_exchange_type_is_rejected(db):
    with pytest.raises(pgq.InvalidArgument):
        pgq.create_exchange("events", "broadcast")
    assert not Exchange.objects.exists()


def test_creating_an_existing_exchange_keeps_the_first(db):
    pgq.create_exchange("events", "topic")
    with pytest.raises(pgq.ExchangeAlreadyExists):
        pgq.create_exchange("events", "direct")
    assert Exchange.objects.get(name="events").type == "topic"


def test_drop_exchange_without_bindings(db, exchange_of):
    x = exchange_of()
    assert pgq.drop_exchange(x.name) is True
    assert pgq.drop_exchange(x.name) is False


def test_drop_exchange_refuses_while_queues_are_bound(db, exchange_of, queue):
    x = exchange_of()
    pgq.bind_queue(queue, x)
    with pytest.raises(pgq.ExchangeInUse) as caught:
        pgq.drop_exchange(x.name)
    assert caught.value.details["queues"] == [queue.name]
    assert Exchange.objects.filter(pk=x.pk).exists()
    assert Binding.objects.filter(exchange=x).count() == 1


def test_drop_exchange_with_cascade_drops_the_bound_queues(db, exchange_of, make_queue):
    x = exchange_of()
    bound, other = make_queue(), make_queue()
    pgq.bind_queue(bound, x)
    pgq.send(bound, {"n": 1})
    assert pgq.drop_exchange(x.name, cascade=True) is True
    assert not Exchange.objects.filter(pk=x.pk).exists()
    names = {q.name for q in pgq.list_queues()}
    assert bound.name not in names and other.name in names
    assert not Message.objects.filter(queue_id=bound.pk).exists()


def test_dropping_a_queue_unbinds_it_even_through_raw_sql(db, exchange_of, make_queue):
    x = exchange_of()
    a, b = make_queue(), make_queue()
    pgq.bind_queue(a, x)
    pgq.bind_queue(b, x)
    pgq.drop_queue(a)
    with connection.cursor() as cur:
        cur.execute("DELETE FROM pgq_queue WHERE id = %s", [b.pk])
    assert not Binding.objects.filter(exchange=x).exists()
    assert pgq.drop_exchange(x.name) is True


# -- binding ------------------------------------------------------------------------------------


def test_binding_twice_with_the_same_key_replaces_the_filters(db, exchange_of, queue):
    x = exchange_of("direct")
    pgq.bind_queue(queue, x, "k", filters={"region": ["eu"]})
    pgq.bind_queue(queue, x, "k", filters={"region": "us"})
    [binding] = Binding.objects.filter(exchange=x)
    assert binding.filters == {"region": ["us"]}


@pytest.mark.parametrize(
    "filters",
    [["a"], {"a": []}, {"a": [{"nested": 1}]}, {"": ["x"]}, {"a": [None]}, "a=b"],
)
def test_bad_filters_are_rejected_and_bind_nothing(db, exchange_of, queue, filters):
    x = exchange_of("headers")
    with pytest.raises(pgq.InvalidArgument):
        pgq.bind_queue(queue, x, filters=filters)
    assert not Binding.objects.exists()


def test_bind_to_unknown_exchange_or_queue_raises(db, exchange_of, queue):
    with pytest.raises(pgq.ExchangeNotFound):
        pgq.bind_queue(queue, "nope")
    with pytest.raises(pgq.QueueNotFound):
        pgq.bind_queue("nope", exchange_of())


def test_unbind_one_key_keeps_the_others(db, exchange_of, queue):
    x = exchange_of("direct")
    pgq.bind_queue(queue, x, "a")
    pgq.bind_queue(queue, x, "b")
    assert pgq.unbind_queue(queue, x, "a") == 1
    assert pgq.publish(x, 1, routing_key="a") == []
    assert len(pgq.publish(x, 2, routing_key="b")) == 1


def test_unbind_without_key_removes_every_binding(db, exchange_of, queue):
    x = exchange_of("direct")
    for key in ("a", "b", ""):
        pgq.bind_queue(queue, x, key)
    assert pgq.unbind_queue(queue, x) == 3
    assert pgq.unbind_queue(queue, x) == 0
    assert not Binding.objects.exists()


# -- routing ------------------------------------------------------------------------------------


def test_fanout_delivers_to_every_bound_queue_and_ignores_keys(db, exchange_of, make_queue):
    x = exchange_of("fanout")
    queues = [make_queue() for _ in range(3)]
    unbound = make_queue()
    pgq.bind_queue(queues[0], x)
    pgq.bind_queue(queues[1], x, "ignored")
    pgq.bind_queue(queues[2], x)
    ids = pgq.publish(x, {"hello": "world"}, routing_key="whatever")
    assert len(ids) == 3 == len(set(ids))
    for q in queues:
        assert _bodies(q) == [{"hello": "world"}]
    assert _bodies(unbound) == []


def test_direct_routes_on_exact_key_equality(db, exchange_of, make_queue):
    x = exchange_of("direct")
    red, blue, empty = make_queue(), make_queue(), make_queue()
    pgq.bind_queue(red, x, "red")
    pgq.bind_queue(blue, x, "blue")
    pgq.bind_queue(empty, x)  # no key: the empty key
    assert len(pgq.publish(x, "r", routing_key="red")) == 1
    assert pgq.publish(x, "R", routing_key="RED") == []
    assert pgq.publish(x, "r.x", routing_key="red.x") == []
    assert len(pgq.publish(x, "none")) == 1
    assert len(pgq.publish(x, "empty", routing_key="")) == 1
    assert (_bodies(red), _bodies(blue), _bodies(empty)) == (["r"], [], ["none", "empty"])


def test_no_matching_binding_returns_an_empty_list_not_an_error(db, exchange_of, queue):
    x = exchange_of("direct")
    assert pgq.publish(x, 1, routing_key="k") == []
    pgq.bind_queue(queue, x, "other")
    assert pgq.publish(x, 1, routing_key="k") == []
    assert not Message.objects.exists()


def _topic_oracle(pattern: str, key: str) -> bool:
    """AMQP topic matching, word by word (independent of the regex compilation)."""

    def match(p: list[str], k: list[str]) -> bool:
        if not p:
            return not k
        if p[0] == "#":
            return any(match(p[1:], k[i:]) for i in range(len(k) + 1))
        if not k:
            return False
        return (p[0] == "*" or p[0] == k[0]) and match(p[1:], k[1:])

    return match(pattern.split("."), key.split("."))


PATTERNS = [
    "#",
    "*",
    "",
    "a",
    "a.*",
    "a.#",
    "#.a",
    "*.b.#",
    "a.#.b",
    "#.#",
    "*.*",
    "a.*.c",
    "a+b.(c)",
    "x|y",
    "#.b.*",
]
KEYS = [
    "",
    "a",
    "b",
    "a.b",
    "a.b.c",
    "a.x.y.b",
    "x.a",
    "a.",
    ".a",
    "a+b.(c)",
    "x|y",
    "x",
    "q.b.r",
    "a.c",
]


def test_topic_patterns_compile_to_the_amqp_rules():
    import re

    for pattern, key in itertools.product(PATTERNS, KEYS):
        expected = _topic_oracle(pattern, key)
        got = re.fullmatch(topic_regex(pattern), topic_subject(key)) is not None
        assert got == expected, (pattern, key)


def test_topic_routing_in_postgresql_agrees_with_the_amqp_rules(db, exchange_of, make_queue):
    x = exchange_of("topic")
    by_pattern = {p: make_queue() for p in PATTERNS}
    for pattern, q in by_pattern.items():
        pgq.bind_queue(q, x, pattern)
    for key in KEYS:
        ids = pgq.publish(x, key, routing_key=key)
        routed = set(Message.objects.filter(msg_id__in=ids).values_list("queue__name", flat=True))
        expected = {q.name for p, q in by_pattern.items() if _topic_oracle(p, key)}
        assert routed == expected, key
        assert len(ids) == len(expected)


def test_hash_alone_matches_every_key_including_the_empty_one(db, exchange_of, queue):
    x = exchange_of("topic")
    pgq.bind_queue(queue, x, "#")
    for key in (None, "", "a", "a.b.c.d"):
        assert len(pgq.publish(x, key, routing_key=key)) == 1


def test_overlapping_bindings_deliver_once_per_queue(db, exchange_of, make_queue):
    x = exchange_of("topic")
    q, other = make_queue(), make_queue()
    for pattern in ("#", "a.*", "a.b", "*.b"):
        pgq.bind_queue(q, x, pattern)
    pgq.bind_queue(other, x, "a.#")
    ids = pgq.publish(x, "once", routing_key="a.b")
    assert len(ids) == 2
    assert _bodies(q) == ["once"] and _bodies(other) == ["once"]


def test_headers_exchange_routes_on_filters(db, exchange_of, make_queue):
    x = exchange_of("headers")
    eu, eu_or_us, any_q, typed = (make_queue() for _ in range(4))
    pgq.bind_queue(eu, x, filters={"region": ["eu"], "kind": ["order"]})
    pgq.bind_queue(eu_or_us, x, filters={"region": ["eu", "us"]})
    pgq.bind_queue(any_q, x)
    pgq.bind_queue(typed, x, filters={"level": [3]})
    pgq.publish(x, "1", headers={"region": "eu", "kind": "order"})
    pgq.publish(x, "2", headers={"region": "us", "kind": "order"})
    pgq.publish(x, "3", attributes={"region": "eu"})  # attributes count when no header
    pgq.publish(x, "4", headers={"kind": "order"})  # missing key never matches
    pgq.publish(x, "5", headers={"level": 3})
    pgq.publish(x, "6", headers={"level": "3"})  # JSON values: "3" is not 3
    assert _bodies(eu) == ["1"]
    assert _bodies(eu_or_us) == ["1", "2", "3"]
    assert _bodies(any_q) == ["1", "2", "3", "4", "5", "6"]
    assert _bodies(typed) == ["5"]


def test_a_header_wins_over_an_attribute_of_the_same_name(db, exchange_of, queue):
    x = exchange_of("headers")
    pgq.bind_queue(queue, x, filters={"region": ["eu"]})
    assert pgq.publish(x, 1, headers={"region": "us"}, attributes={"region": "eu"}) == []


def test_filters_also_narrow_fanout_direct_and_topic(db, exchange_of, queue):
    for kind, key in (("fanout", None), ("direct", "k"), ("topic", "a.*")):
        x = exchange_of(kind)
        pgq.bind_queue(queue, x, key, filters={"tenant": ["t1"]})
        rk = "a.b" if kind == "topic" else key
        assert pgq.publish(x, 1, routing_key=rk, attributes={"tenant": "t2"}) == []
        assert len(pgq.publish(x, 1, routing_key=rk, attributes={"tenant": "t1"})) == 1


# -- publishing ----------------------------------------------------------------------------------


def test_publish_applies_send_options_to_every_copy(db, exchange_of, make_queue):
    x = exchange_of()
    a, b = make_queue(), make_queue()
    pgq.bind_queue(a, x)
    pgq.bind_queue(b, x)
    ids = pgq.publish(x, {"v": 1}, headers={"h": 1}, priority=-5, label="lbl", delay=3600)
    rows = Message.objects.filter(msg_id__in=ids)
    assert {(m.headers["h"], m.priority, m.label) for m in rows} == {(1, -5, "lbl")}
    assert pgq.read(a) == [] and pgq.read(b) == []  # delayed


def test_published_messages_are_read_like_sent_ones_and_counted(db, exchange_of, queue):
    x = exchange_of()
    pgq.bind_queue(queue, x)
    [msg_id] = pgq.publish(x, {"n": 42})
    [m] = pgq.read(queue)
    assert (m.msg_id, m.message, m.read_ct) == (msg_id, {"n": 42}, 1)
    assert QueueCounter.objects.filter(queue=queue, kind="sent").count() == 1
    assert pgq.metrics(queue).total_messages == 1


def test_publish_to_unknown_exchange_raises(db):
    with pytest.raises(pgq.ExchangeNotFound):
        pgq.publish("missing", 1)
    with pytest.raises(pgq.InvalidName):
        pgq.publish("bad name", 1)


def test_publish_with_bad_options_changes_nothing(db, exchange_of, queue):
    x = exchange_of()
    pgq.bind_queue(queue, x)
    with pytest.raises(pgq.PgqError):
        pgq.publish(x, 1, priority="high")
    with pytest.raises(pgq.InvalidMessage):
        pgq.publish(x, {1, 2})
    with pytest.raises(pgq.InvalidArgument):
        pgq.publish(x, 1, routing_key=5)
    assert not Message.objects.exists()


def test_a_body_too_large_for_one_bound_queue_sends_no_copy(db, exchange_of, make_queue):
    x = exchange_of()
    big, small = make_queue(), make_queue(max_message_size=10)
    pgq.bind_queue(big, x)
    pgq.bind_queue(small, x)
    with pytest.raises(pgq.MessageTooLarge) as caught:
        pgq.publish(x, "a" * 100)
    assert caught.value.details["queue"] == small.name
    assert not Message.objects.exists()


def test_publish_rolls_back_with_the_callers_transaction(db, exchange_of, queue):
    x = exchange_of()
    pgq.bind_queue(queue, x)
    with pytest.raises(RuntimeError), transaction.atomic():
        assert len(pgq.publish(x, 1)) == 1
        raise RuntimeError
    assert not Message.objects.exists()


def test_publish_is_one_round_trip(db, exchange_of, make_queue, django_assert_num_queries):
    x = exchange_of()
    for _ in range(10):
        pgq.bind_queue(make_queue(), x)
    with django_assert_num_queries(1):
        ids = pgq.publish(x, {"fan": "out"})
    assert len(ids) == 10


def test_a_committed_publish_wakes_listeners_of_each_routed_queue(transactional_db):
    from pgq_django.store.notify import Listener

    x = pgq.create_exchange(_name(), "direct")
    a, b, c = (pgq.create_queue(_name("q")) for _ in range(3))
    pgq.bind_queue(a, x, "k")
    pgq.bind_queue(b, x, "k")
    pgq.bind_queue(c, x, "other")
    listener = Listener()
    try:
        listener.drain()
        pgq.publish(x, 1, routing_key="k")
        woken: set[str] = set()
        for _ in range(20):
            woken |= listener.wait(timeout=0.5)
            if {a.name, b.name} <= woken:
                break
        assert {a.name, b.name} <= woken
        assert c.name not in woken
    finally:
        listener.close()


def test_every_exchange_function_has_an_async_twin():
    for name in (
        "create_exchange",
        "drop_exchange",
        "bind_queue",
        "unbind_queue",
        "publish",
        "grant_queue_access",
        "revoke_publish_access",
    ):
        assert callable(getattr(pgq, "a" + name))


# -- deduplication ----------------------------------------------------------------------------


def test_publish_with_a_dedup_id_twice_gives_one_copy_per_queue_like_send(
    db, exchange_of, make_queue
):
    x = exchange_of("fanout")
    a, b = make_queue(), make_queue()
    pgq.bind_queue(a, x)
    pgq.bind_queue(b, x)
    first = pgq.publish(x, {"n": 1}, dedup_id="order-7")
    again = pgq.publish(x, {"n": 1}, dedup_id="order-7")
    assert again == first and len(first) == 2
    assert _bodies(a) == [{"n": 1}] and _bodies(b) == [{"n": 1}]
    assert QueueCounter.objects.filter(queue=a, kind="sent").count() == 1
    # A queue bound since then gets its copy; the others still get none.
    c = make_queue()
    pgq.bind_queue(c, x)
    third = pgq.publish(x, {"n": 1}, dedup_id="order-7")
    assert set(first) < set(third) and len(third) == 3
    assert (len(_bodies(a)), len(_bodies(b)), len(_bodies(c))) == (1, 1, 1)
    # A send under the same dedup_id to a routed queue is the same duplicate.
    assert pgq.send(a, {"n": 1}, dedup_id="order-7") in first
    # Another dedup_id, or none, publishes again.
    assert len(pgq.publish(x, {"n": 2}, dedup_id="order-8")) == 3
    assert len(pgq.publish(x, {"n": 3})) == 3
    assert len(_bodies(a)) == 3
