"""Where a repair puts a stray row of the default partition: pure arithmetic on the ranges."""

from __future__ import annotations

from pgq_django.partitions import repair_slot


def test_the_slot_of_a_stray_row_continues_the_grid_and_fits_its_gap() -> None:
    ranges = [(100, 200), (500, 600)]
    assert repair_slot(250, ranges, 100) == (200, 300)
    assert repair_slot(450, ranges, 100) == (400, 500)
    assert repair_slot(480, ranges, 300) == (200, 500)  # clipped to the gap
    assert repair_slot(50, ranges, 30) == (40, 70)  # back from the range above
    assert repair_slot(650, ranges, 100) == (600, 700)
    assert repair_slot(1, [], 100) == (1, 101)


def test_the_slot_of_a_row_of_the_second_id_space_stays_inside_that_space() -> None:
    first, end = 4 * 10**15, 2**53
    assert repair_slot(first + 150, [], 100, first=first, end=end) == (first + 100, first + 200)
    # Back from a range above, never below the space's first id.
    assert repair_slot(first + 5, [(first + 30, first + 130)], 100, first=first) == (
        first,
        first + 30,
    )
    assert repair_slot(end - 10, [], 100, first=first, end=end)[1] == end  # clipped at its end
