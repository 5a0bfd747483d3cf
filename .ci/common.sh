# Shared by the CI scripts (sourced, not run).
#
# What a matrix row runs: the tests that go through PostgreSQL and the code paths the row
# changes (the server version, a pooler, the fast paths). The browser, Spark, documentation,
# benchmark-smoke and installation tests do not depend on any of those; `make test` runs
# them once.
ROW_TESTS='not (spark or browser or docs or bench or install)'
# As in the Makefile: parallel, a test file per worker at a time.
TEST_WORKERS=${TEST_WORKERS:-4}
PARALLEL=(-n "$TEST_WORKERS" --dist loadfile)
