"""Two views: one enqueues a task, one reads its result back through the backend."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.urls import path

from . import tasks


def enqueue_add(request: HttpRequest) -> JsonResponse:
    result = tasks.add.enqueue(int(request.POST["a"]), int(request.POST["b"]))
    return JsonResponse({"id": result.id, "status": str(result.status)}, status=202)


def show_result(request: HttpRequest, result_id: str) -> JsonResponse:
    result = tasks.add.get_result(result_id)
    body: dict[str, object] = {"status": str(result.status)}
    if result.is_finished and not result.errors:
        body["value"] = result.return_value
    return JsonResponse(body)


urlpatterns = [
    path("add", enqueue_add),
    path("result/<str:result_id>", show_result),
]
