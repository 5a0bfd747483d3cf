"""PGQ["PGMQ_SCHEMA"]: the system checks report a value migrate would refuse."""

from __future__ import annotations

import pytest
from django.test import override_settings

from pgq_django.checks import check_settings
from pgq_django.pgmq.install import PgmqSchemaConflict, configured_schema


@pytest.mark.parametrize("good", [None, "pgmq", "pgmq_move", "_q2"])
def test_none_or_a_plain_lower_case_name_passes(good: object) -> None:
    with override_settings(PGQ={"PGMQ_SCHEMA": good}):
        assert check_settings() == []
        assert configured_schema() == good


@pytest.mark.parametrize("bad", ["PGMQ", "pg mq", 'x"; DROP SCHEMA public; --', "", 7, True])
def test_anything_else_is_reported_and_refused(bad: object) -> None:
    with override_settings(PGQ={"PGMQ_SCHEMA": bad}):
        errors = check_settings()
        assert [e.id for e in errors] == ["pgq_django.E009"]
        assert "PGMQ_SCHEMA" in errors[0].msg
        with pytest.raises(PgmqSchemaConflict, match="lower-case SQL name"):
            configured_schema()
