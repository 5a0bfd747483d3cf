"""The task of the telemetry tests' django.tasks case (the tutorial's welcome e-mail)."""

from __future__ import annotations

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task


@task
def send_welcome_email(to: str) -> str:
    return f"welcome sent to {to}"
