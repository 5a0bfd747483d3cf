"""The statement catalogue (docs/reference/sql.md) is rendered from pgq_django/store/sql/."""

from __future__ import annotations

from pathlib import Path

from pgq_django.store import sql
from pgq_django.store.sql import catalogue, messages, partitions

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "sql.md"


def test_the_rendered_catalogue_is_current() -> None:
    rendered = catalogue.render()
    assert PAGE.read_text(encoding="utf-8") == rendered, (
        "docs/reference/sql.md is stale:"
        " python -m pgq_django.store.sql.catalogue > docs/reference/sql.md"
    )


def test_every_statement_is_on_the_page_under_its_name_with_its_runner() -> None:
    page = catalogue.render()
    users = catalogue.statement_users()
    for module, name, _statement in sql.statements():
        section = page.split(f"\n### {name}\n", 1)
        assert len(section) == 2, f"{module}.{name} has no section"
        body = section[1].split("\n### ", 1)[0]
        for path, function in users[(module, name)]:
            assert f"`{path}`: `{function}`" in body


def test_a_template_shows_its_identifiers_and_a_variant_statement_each_text() -> None:
    assert catalogue.text_of(partitions.DROP_PARTITION) == "DROP TABLE {partition}"
    page = catalogue.render()
    read = page.split("\n### READ\n", 1)[1].split("\n### ", 1)[0]
    for shape, text in messages.READ.items():
        assert f"`[{shape}]`" in read
        assert catalogue.text_of(text) in read


def test_check_mode_reports_a_stale_file(tmp_path: Path) -> None:
    stale = tmp_path / "sql.md"
    stale.write_text("# SQL statements\n", encoding="utf-8")
    assert catalogue.main(["--check", str(stale)]) == 1
    stale.write_text(catalogue.render(), encoding="utf-8")
    assert catalogue.main(["--check", str(stale)]) == 0


def test_descriptions_come_from_the_comment_above_each_statement() -> None:
    assert catalogue.description("messages", "SEND").startswith("Insert messages into a queue")
    assert catalogue.description("messages", "NO_SUCH_STATEMENT") == ""
