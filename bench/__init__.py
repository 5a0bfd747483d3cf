"""Benchmarks: each module measures pgq_django against its peers in one run and prints ratios.

Run them all with ``make bench`` (``python -m bench``) or one with ``python -m bench.core``;
``--quick`` makes a small smoke run. Results also land as JSON in bench/results/.
"""
