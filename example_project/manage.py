#!/usr/bin/env python
"""Django's command-line utility for the example project.

Run from the repository root (``python example_project/manage.py ...``) or from here; the
repository root is put on ``sys.path`` so ``example_project`` and ``pgq_django`` import
without installing anything.
"""

import os
import sys
from pathlib import Path


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
