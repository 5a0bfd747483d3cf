"""MkDocs hooks for the pgq_django site.

Docstrings in pgq_django use Sphinx cross-reference roles (``:func:`read```), which read
well in the source and in ``help()``. mkdocstrings renders them literally, so this hook drops
the role prefix and keeps the code-formatted name.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:func|class|meth|attr|data|mod|exc|obj):(?=<code>)")


def on_page_content(html: str, **kwargs: Any) -> str:
    return _ROLE.sub("", html)
