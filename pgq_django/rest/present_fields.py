"""REST request validation that visits only the fields a request sent (the ``present_fields``
shortcut of ``PGQ["FAST_PATHS"]``).

DRF's ``Serializer.to_internal_value`` visits every declared field of every item, and an
absent optional field costs about as much as a present one (it is skipped by an exception);
for a batch of messages that is most of the validation. The loop here does what DRF's does
for each field it visits, through DRF's public names only, and is used for the plain
serializers of :mod:`pgq_django.rest.serializers`. It lives in the REST layer, not in
:mod:`pgq_django.seams`, because it names nothing private: it only redoes a public loop, and
keeping it here keeps DRF out of processes that never serve REST (a worker, a web process
that only sends).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework.exceptions import ValidationError
from rest_framework.fields import SkipField, empty, get_error_detail

from .. import seams


def validate_present_fields(serializer: Any, data: dict[str, Any]) -> dict[str, Any] | None:
    """``serializer.to_internal_value(data)`` visiting only the fields ``data`` holds and
    the required ones, or None: then the caller runs DRF's own loop (the public path).

    DRF's loop visits every declared field of every item, and an absent optional field costs
    about as much as a present one (it is skipped by an exception); for a batch of messages
    that is most of the validation. This loop does what DRF's does for each field it
    visits (``run_validation``, DRF and Django validation errors gathered per field, a
    skipped field left out), which is exact only for a plain serializer: no defaults, no
    read-only fields, sources equal to names, no ``validate_<name>`` methods, no
    validators. Detected per serializer instance; any other shape takes DRF's loop.
    """
    if not seams.on("present_fields"):
        return None
    fields, required, plain = _field_table(serializer)
    if not plain:
        return None
    out: dict[str, Any] = {}
    errors: dict[str, Any] = {}
    for name, field in fields.items():  # in DRF's order, so answers list errors alike
        if name not in data and name not in required:
            continue
        try:
            out[name] = field.run_validation(data.get(name, empty))
        except ValidationError as exc:
            errors[name] = exc.detail
        except DjangoValidationError as exc:
            errors[name] = get_error_detail(exc)
        except SkipField:
            pass
    if errors:
        raise ValidationError(errors)
    return out


def _field_table(serializer: Any) -> tuple[dict[str, Any], frozenset[str], bool]:
    """The serializer's fields as a plain dict, the required names, and whether it has the
    plain shape the shortcut needs (computed once per instance)."""
    cached: tuple[dict[str, Any], frozenset[str], bool] | None
    cached = serializer.__dict__.get("_pgq_fields")
    if cached is None:
        fields = dict(serializer.fields)
        plain = not serializer.validators and all(
            field.default is empty
            and not field.read_only
            and field.source == name
            and not hasattr(serializer, f"validate_{name}")
            for name, field in fields.items()
        )
        required = frozenset(name for name, field in fields.items() if field.required)
        cached = serializer.__dict__["_pgq_fields"] = (fields, required, plain)
    return cached
