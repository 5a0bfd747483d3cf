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
