"""REST routes of the contexts app (mounted under /api/v1/)."""

urlpatterns: list[object] = []
