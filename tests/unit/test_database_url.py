"""``DATABASE_URL`` as a Django database dict: a malformed one names the setting, never the
password (:mod:`pgq_django.database_url`)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from pgq_django.database_url import dsn_to_django

SECRET = "Hunter2xyz"

# Each is how a real mistake looks: libpq's own message quotes the part it stopped at, which
# is the password, a piece of it, or the whole string.
MALFORMED = {
    "percent sign in the password": f"postgresql://app:{SECRET}%zz@db/shop",
    "scheme forgotten": f"app:{SECRET}@db/shop",
    "bracket of an IPv6 host unclosed": f"postgresql://app:{SECRET}@[::1/shop",
    "unknown query parameter": f"postgresql://app:{SECRET}@db/shop?sslmod=require",
    "password as a query parameter, then junk": f"postgresql://db/shop?password={SECRET}&x=1",
    "space in an unquoted keyword password": f"host=db password={SECRET[:4]} {SECRET[4:]}",
    "unterminated quoted keyword password": f"host=db password='{SECRET}",
    "'@' in the password moves it into the port": f"postgresql://app:ab@{SECRET}:x@db/shop",
}


@pytest.mark.parametrize("dsn", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_url_names_the_setting_and_never_the_password(dsn: str) -> None:
    with pytest.raises(ImproperlyConfigured) as caught:
        dsn_to_django(dsn)
    message = str(caught.value)
    assert message.startswith("DATABASE_URL ")
    assert "percent-encode" in message  # what to do about it
    for piece in (SECRET, SECRET[:4], SECRET[4:], dsn):
        assert piece not in message
    # psycopg's error (which quotes the string) is not chained into the traceback either.
    error = caught.value
    assert error.__cause__ is None
    assert error.__context__ is None or error.__suppress_context__


def test_the_error_names_the_setting_the_caller_read() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"^REPLICA_URL is not a valid"):
        dsn_to_django(f"postgresql://app:{SECRET}@[::1/shop", setting="REPLICA_URL")


def test_libpq_punctuation_and_the_reason_stay_readable() -> None:
    with pytest.raises(ImproperlyConfigured) as caught:
        dsn_to_django(f"postgresql://app:{SECRET}@[::1/shop")
    assert 'looking for matching "]" in IPv6 host address' in str(caught.value)


@pytest.mark.parametrize(
    ("dsn", "expected"),
    [
        (
            f"postgresql://app:{SECRET}@db:5433/shop?sslmode=require",
            {"USER": "app", "PASSWORD": SECRET, "HOST": "db", "PORT": "5433", "NAME": "shop"},
        ),
        ("host=/var/run/postgresql dbname=shop", {"HOST": "/var/run/postgresql", "NAME": "shop"}),
        ("postgresql://db1:5432,db2:5433/shop", {"HOST": "db1,db2", "PORT": "5432,5433"}),
        ("postgresql://app:p%40ss@db/shop", {"PASSWORD": "p@ss"}),
    ],
)
def test_well_formed_urls_still_parse(dsn: str, expected: dict[str, str]) -> None:
    db = dsn_to_django(dsn)
    assert {key: db[key] for key in expected} == expected
