"""Reads and writes by id touch only the partitions that hold those ids (EXPLAIN says so),
and the statements that act on messages by id plan alike with or without their values, so
PostgreSQL keeps one plan for them however many ranges there are.

The message table gets real partitions here: tiny ranges (PARTITION_SIZE=100) premade past
every existing range, and messages sent across three of them. Each statement is explained
the two ways PostgreSQL may plan it: with its parameter values (a custom plan, pruned at
planning) and, prepared under ``plan_cache_mode = force_generic_plan``, with a generic plan
that can only prune when the executor starts ("Subplans Removed") or, for an id that comes
through a sub-select, as it runs (the other ranges' scans are never executed).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

import pgq_django as pgq
from pgq_django import partitions
from pgq_django.store.sql import delivery, messages
from tests.conftest import (
    custom_plan,
    generic_plan,
    plan_relations,
    sequence_kept,
    set_sequence,
    top_of_ranges,
)

SIZE = 100


@pytest.fixture
def three_ranges(db: Any, queue: Any) -> Any:
    """Messages in three tiny ranges; answers (queue, [range lowers], {lower: [ids]})."""
    with (
        sequence_kept(),
        override_settings(PGQ={"PARTITION_SIZE": SIZE, "PARTITION_PREMAKE": 3}),
    ):
        top = top_of_ranges()
        set_sequence(top - 1)
        partitions.premake_partitions()
        ids = pgq.send_batch(queue, [{"n": i} for i in range(2 * SIZE + SIZE // 2)])
        lowers = [top, top + SIZE, top + 2 * SIZE]
        by_range = {lo: [i for i in ids if lo <= i < lo + SIZE] for lo in lowers}
        assert all(by_range.values())
        yield queue, lowers, by_range


def _removed(plan: dict[str, Any]) -> int:
    return int(plan.get("Subplans Removed", 0)) + sum(_removed(c) for c in plan.get("Plans", []))


def _live(lower: int) -> str:
    return f"pgq_message_r{lower}"


def _message_partitions(plan: dict[str, Any]) -> set[str]:
    return {r for r in plan_relations(plan) if r.startswith("pgq_message_")}


def test_read_by_id_touches_one_partition_in_either_plan(three_ranges):
    queue, lowers, by_range = three_ranges
    params = {"queue": queue.name, "msg_id": by_range[lowers[1]][0]}
    assert _message_partitions(custom_plan(messages.READ_BY_ID, params)) == {_live(lowers[1])}
    generic = generic_plan(messages.READ_BY_ID, params)
    # The generic plan lists every partition; the executor removed all but one at start-up.
    scanned = _message_partitions(generic)
    assert len(scanned) == 1 and _removed(generic) >= 3


def _executed(plan: dict[str, Any]) -> set[str]:
    """The message partitions an EXPLAIN ANALYZE plan scanned at least once."""
    found = set()
    if plan.get("Relation Name", "").startswith("pgq_message_") and plan.get("Actual Loops"):
        found.add(plan["Relation Name"])
    for child in plan.get("Plans", []):
        found |= _executed(child)
    return found


def test_an_ack_or_lease_change_of_one_message_runs_only_the_partition_holding_it(three_ranges):
    queue, lowers, by_range = three_ranges
    msg_id = by_range[lowers[1]][0]
    one = {"queue": queue.name, "msg_id": msg_id, "ct": None, "result": None}
    for statement, params in (
        (messages.ACK_ONE, one),
        (messages.DELETE_ONE[False], one),
        (messages.DELETE_ONE_UNCOUNTED[False], one),
        (messages.SET_VT, {**one, "vt": 5}),
    ):
        # Planning prunes nothing, even with the id known: a call's own plan never looks
        # cheaper than the one kept across calls, so PostgreSQL keeps that one instead of
        # planning again on every call (which it did once the table had a few ranges).
        assert {_live(lo) for lo in lowers} <= _message_partitions(custom_plan(statement, params))
        generic = generic_plan(statement, params)
        # Every range is in the kept plan; only the one holding the message was scanned.
        assert {_live(lo) for lo in lowers} <= _message_partitions(generic)
        assert _executed(generic) == {_live(lowers[1])}, statement


def test_an_ack_of_several_messages_cannot_prune_its_array_of_ids(three_ranges):
    """Documented limit: PostgreSQL prunes on ``= ANY`` of an array only when the array is a
    constant of the plan, and the ids reach the statement through a sub-select (so that it
    keeps one plan), so each live partition's primary key is probed."""
    queue, lowers, by_range = three_ranges
    ids = by_range[lowers[0]][:3]
    params = {"queue": queue.name, "ids": ids, "cts": [None] * len(ids), "result": None}
    assert {_live(lo) for lo in lowers} <= _message_partitions(
        custom_plan(messages.DELETE[False], params)
    )
    generic = generic_plan(messages.DELETE[False], params)
    assert {_live(lo) for lo in lowers} <= _executed(generic)
    assert _removed(generic) == 0


def test_the_result_of_a_message_touches_one_partition_of_each_table(three_ranges):
    _queue, lowers, by_range = three_ranges
    msg_id = by_range[lowers[2]][5]
    plan = custom_plan(delivery.RESULT, {"msg_id": msg_id})
    assert {r for r in plan_relations(plan) if r.startswith("pgq_")} == {
        "pgq_queue",
        _live(lowers[2]),
        f"pgq_archived_message_r{lowers[2]}",
    }


def test_the_hot_read_walks_the_ready_index_of_each_live_partition(three_ranges):
    """Documented limit: the read has no msg_id bound, so it cannot prune.

    It merges every live partition (Merge Append): the ready index of each range holding
    messages, one short index scan each; that is why upkeep drops drained ranges instead of
    leaving them empty. (A partition the planner knows to be nearly empty may be read
    whole instead, which costs it a page or two.)
    """
    queue, lowers, _ = three_ranges
    params = {"queue": queue.name, "qty": 10, "vt": 30, "max_bytes": 10**6}
    plan = custom_plan(messages.READ[False].format(filters=""), params)
    # The queue lookup may scan the tiny pgq_queue table; the ranges holding messages must not.
    scanned = {n.get("Relation Name", "") for n in _nodes(plan, "Seq Scan")}
    assert not scanned & {_live(lo) for lo in lowers}, scanned
    assert {_live(lo) for lo in lowers} <= _message_partitions(plan)
    merges = _nodes(plan, "Merge Append")
    assert len(merges) == 1
    live = [p.name for p in partitions.list_partitions("pgq_message")]
    assert set(plan_relations(merges[0])) == {*live, "pgq_message_default"}
    walked = {n["Relation Name"]: n.get("Index Name", "") for n in _nodes(merges[0], "Index Scan")}
    assert all("queue_id_priority" in walked.get(_live(lo), "") for lo in lowers), walked


def _nodes(plan: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    found = [plan] if plan["Node Type"] == kind else []
    for child in plan.get("Plans", []):
        found += _nodes(child, kind)
    return found
