"""Every Python sample of the documentation at least compiles (no database needed).

Running the samples is tests/acceptance/test_docs.py's job; this catches, in a second, a
page that shows code nobody could paste (a top-level ``await``, a typo).
"""

from __future__ import annotations

import re

from tests.conftest import ROOT

_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def test_every_python_block_of_every_page_compiles() -> None:
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
    compiled = 0
    for path in pages:
        for number, block in enumerate(_BLOCK.findall(path.read_text()), 1):
            compile(block, f"{path.relative_to(ROOT)}:block{number}", "exec")
            compiled += 1
    assert compiled > 0
