"""The SQL of the schema the PGMQ SQL interface installs.

The schema's own SQL (types, views, functions) lives in the ``.sql`` files beside this
module, in the order :data:`SCRIPTS` gives. They are templates: wherever a function applies
a rule about messages that the store owns (how a message is written, leased, acknowledged,
archived, counted and announced), the file names the store's statement or fragment by a
placeholder, and :func:`pgq_django.store.sql.pgmq_interface.render` writes in the store's
own text when :func:`pgq_django.pgmq.install.script` renders the file, so one change reaches
the Python API and the PGMQ functions alike. The other placeholders are ``@extschema@``
(the schema, ``PGQ["PGMQ_SCHEMA"]``), ``@pgq@`` (the schema of pgq_django's tables),
``@channel@`` (``PGQ["NOTIFY_CHANNEL"]`` as a literal), ``@forever@``, the longest retention
the API accepts, which means "never expires", and the store's text rules as literals:
``@reserved_prefix@`` (:data:`pgq_django.validation.RESERVED_HEADER_PREFIX`) and
``@not_xml@`` (:data:`pgq_django.validation.NOT_XML_IN_JSON`). The named statements the
installer runs around them live with the store's others, in
:mod:`pgq_django.store.sql.pgmq_interface`.
"""

from __future__ import annotations

from importlib.resources import files

# The files of the schema, in the order they run.
SCRIPTS = ("schema.sql", "functions.sql")

# What the schema's comment starts with: how install tells its own schema from another's.
OWN_SCHEMA_MARK = "pgq_django:"


def script_text(name: str) -> str:
    """The text of one of :data:`SCRIPTS`, placeholders unfilled."""
    return files(__name__).joinpath(name).read_text(encoding="utf-8")
