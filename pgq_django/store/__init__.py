"""The store: everything that persists messages for a database alias, below the API.

- :mod:`.sql`: every statement, named, one module per concern (rendered in full in
  docs/reference/sql.md by :mod:`.sql.catalogue`);
- :mod:`.db`: the one runner that executes them on Django's connection;
- :mod:`.managers`: the models' managers, one method per statement, thin faces over the
  runner (the models themselves live in :mod:`pgq_django.models`, where Django looks for
  them); the operations they share with the Spark pipeline
  (:mod:`.managers.operations`, :mod:`.managers.pipeline`) run on any connection of
  :mod:`.connection`: Django's, or a plain psycopg one;
- :mod:`.server_functions`: the hot statements as server-side functions, for poolers;
- the per-process services: the counter flusher (:mod:`.tallies`), the trailing wake-ups
  of throttled sends (:mod:`.wakeups`) and the LISTEN hub (:mod:`.notify`), each on the
  start/stop base of :mod:`pgq_django.services`.

Nothing here imports the API, the worker or a transport: a send reads api -> store.managers
-> store.db -> store.sql, and no call climbs back up.
"""
