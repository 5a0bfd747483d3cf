"""The admin offers no bulk delete: queues and exchanges go one at a time, through the API."""

from __future__ import annotations

import pytest
from django.contrib.admin.sites import site
from django.contrib.auth.models import User
from django.test import RequestFactory

from pgq_django.models import Exchange, Queue


@pytest.mark.parametrize("model", [Queue, Exchange])
def test_changelists_have_no_delete_selected_action(db, model):
    request = RequestFactory().get("/admin/")
    request.user = User.objects.create_superuser("root", "root@example.com", "pw")
    actions = site.get_model_admin(model).get_actions(request)
    assert "delete_selected" not in actions
