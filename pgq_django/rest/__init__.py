"""The REST API: psqlqueue's paths and fields over the functional API (DESIGN.md section 5).

Mount it with ``path("", include("pgq_django.rest.urls"))``. Modules by concern:
:mod:`.exceptions` (the one error mapping), :mod:`.parsers` (a size-capped JSON parser),
:mod:`.permissions` (authentication and grants), :mod:`.serializers` (what goes in and out),
:mod:`.views` (thin translators to ``pgq_django``) and :mod:`.urls`.
"""
