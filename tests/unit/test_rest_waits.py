"""Which long-poll waits hold a thread of their own (and so close their connections while
they wait, and count against PGQ["REST_MAX_THREAD_WAITS"])."""

from __future__ import annotations

import threading

from django.test import override_settings

from pgq_django.asgi import PooledASGIHandler
from pgq_django.rest.views.messages import ThreadWaits, holds_own_thread


def test_a_thread_of_the_pgq_asgi_pool_is_shared_and_any_other_is_the_requests_own():
    handler = PooledASGIHandler(2)
    try:
        assert handler.executors[1].submit(holds_own_thread).result() is False
    finally:
        for executor in handler.executors:
            executor.shutdown()
    assert holds_own_thread() is True  # a WSGI server's request thread, say
    found: list[bool] = []
    other = threading.Thread(target=lambda: found.append(holds_own_thread()))
    other.start()
    other.join()
    assert found == [True]


def test_thread_waits_take_places_up_to_the_setting_and_give_them_back():
    waits = ThreadWaits()
    with override_settings(PGQ={"REST_MAX_THREAD_WAITS": 2}):
        assert waits.acquire() and waits.acquire()
        assert not waits.acquire()
        waits.release()
        assert waits.acquire()
        assert waits.count == 2
