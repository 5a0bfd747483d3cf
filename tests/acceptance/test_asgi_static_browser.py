"""Served with uvicorn as docs/rest.md shows, the admin is styled and Swagger UI renders.

An ASGI server serves only what the application answers, and Django answers static files
only under ``runserver``: without the page's WhiteNoise settings the admin's CSS and Swagger
UI's scripts are 404s, the admin comes unstyled and ``/v1/docs`` stays blank. The site here
is the test settings with the page's static-files block laid over them, the page's
``asgi.py`` written out verbatim, ``collectstatic`` run, and uvicorn started on it; headless
Chromium then looks.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from django.contrib.auth.models import User

from pgq_django.testing import LiveServer, start_asgi_server
from tests.acceptance.test_admin_browser import PASSWORD, chromium, needs_chromium
from tests.conftest import ROOT, run_django, subprocess_env

pytestmark = pytest.mark.browser

__all__ = ["chromium"]  # the fixture: one Chromium for the module

PAGE = ROOT / "docs" / "rest.md"
# The admin's header colour (its --header-bg), which only its own CSS sets.
ADMIN_HEADER = "rgb(65, 118, 144)"


def _block(heading: str) -> str:
    """The page's python block whose first line is ``heading``."""
    blocks = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), re.MULTILINE | re.DOTALL)
    [found] = [block for block in blocks if block.startswith(heading)]
    return str(found)


@pytest.fixture
def documented_site(transactional_db: Any, tmp_path: Path) -> Iterator[LiveServer]:
    """uvicorn serving the page's ``asgi.py`` on the test settings plus the page's
    static-files settings, after ``collectstatic``, as a reader would run them."""
    static = _block("# settings.py (static files)")
    assert "whitenoise.middleware.WhiteNoiseMiddleware" in static
    (tmp_path / "docs_site_settings.py").write_text(
        "from tests.settings import *  # noqa: F403\n"
        f"{static}\n"
        f"STATIC_ROOT = {str(tmp_path / 'staticfiles')!r}  # not the checkout's\n"
        "DEBUG = False\n"
    )
    (tmp_path / "docs_asgi.py").write_text(_block("# asgi.py"))
    env = {
        "DJANGO_SETTINGS_MODULE": "docs_site_settings",
        "PYTHONPATH": f"{tmp_path}:{ROOT}",
    }
    collected = run_django("collectstatic", "--noinput", **env)
    assert collected.returncode == 0, collected.stderr
    server = start_asgi_server(
        "docs_asgi:application",
        env={**subprocess_env(), **env},
        cwd=tmp_path,
        ready_path="/admin/login/",
    )
    with server:
        yield server


@needs_chromium
def test_the_admin_is_styled_and_swagger_ui_renders_under_uvicorn(
    documented_site: LiveServer, chromium: Any
) -> None:
    url = documented_site.url
    css = requests.get(f"{url}/static/admin/css/base.css", timeout=30)
    assert css.status_code == 200
    assert css.headers["Content-Type"].startswith("text/css")
    User.objects.create_superuser("admin", "admin@example.com", PASSWORD)
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        page.set_default_timeout(15_000)
        missing: list[str] = []
        page.on("response", lambda r: missing.append(r.url) if r.status >= 400 else None)
        page.goto(f"{url}/admin/login/?next=/admin/")
        page.fill("#id_username", "admin")
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit]")
        page.wait_for_url(f"{url}/admin/")
        header = page.locator("#header").evaluate("e => getComputedStyle(e).backgroundColor")
        assert header == ADMIN_HEADER
        page.goto(f"{url}/v1/docs")
        page.wait_for_selector(".swagger-ui .opblock")
        assert page.locator(".swagger-ui .opblock").count() > 10
        assert missing == []
    finally:
        context.close()
