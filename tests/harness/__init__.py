"""A Django app for the test settings only: what the test harness needs from Django's own
extension points (today, the ``flush`` command that tests' teardown runs)."""
