"""The Django admin lists every queries model read-only: no add, change or delete, for anyone."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.db import models
from django.test import Client, RequestFactory
from django.urls import reverse

from queries.admin import ReadOnlyAdmin

QUERIES_ADMINS = sorted(
    ((model, model_admin) for model, model_admin in admin.site._registry.items() if model._meta.app_label == "queries"),
    key=lambda pair: pair[0]._meta.model_name,
)


def test_every_queries_model_is_registered_read_only() -> None:
    from django.apps import apps

    registered = {model for model, _ in QUERIES_ADMINS}
    assert registered == set(apps.get_app_config("queries").get_models())
    assert all(isinstance(model_admin, ReadOnlyAdmin) for _, model_admin in QUERIES_ADMINS)


@pytest.fixture
def superuser_client(db: None) -> Client:
    user = get_user_model().objects.create_superuser("root-admin", "root@example.org", "x" * 20)
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.usefixtures("demo_loaded")
@pytest.mark.parametrize(("model", "model_admin"), QUERIES_ADMINS, ids=[m._meta.model_name for m, _ in QUERIES_ADMINS])
def test_superuser_can_browse_but_not_edit(
    superuser_client: Client, model: type[models.Model], model_admin: admin.ModelAdmin
) -> None:
    url = f"admin:{model._meta.app_label}_{model._meta.model_name}"
    request = RequestFactory().get("/")
    request.user = get_user_model().objects.get(username="root-admin")
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request)
    assert not model_admin.has_delete_permission(request)

    assert superuser_client.get(reverse(f"{url}_changelist")).status_code == 200
    assert superuser_client.get(reverse(f"{url}_add")).status_code == 403
    obj = model.objects.order_by("pk").first()
    detail = superuser_client.get(reverse(f"{url}_change", args=[obj.pk]))
    assert detail.status_code == 200
    assert b'name="_save"' not in detail.content
    deleted = superuser_client.post(reverse(f"{url}_delete", args=[obj.pk]), {"post": "yes"})
    assert deleted.status_code == 403
    assert model.objects.filter(pk=obj.pk).exists()
