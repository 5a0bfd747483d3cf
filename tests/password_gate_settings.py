"""The test settings with the gated password hasher (tests/password_gate.py).

A live server started with ``DJANGO_SETTINGS_MODULE=tests.password_gate_settings`` and
``PGQ_TEST_HASH_GATE`` reports each password it hashes to the test that started it, which
can hold the hash there; everything else is tests.settings, including ``PGQ_TEST_PGQ``.
"""

from tests.settings import *  # noqa: F403

PASSWORD_HASHERS = ["tests.password_gate.GatedMD5Hasher"]
