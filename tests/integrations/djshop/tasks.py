"""The project's tasks, written against Django's Tasks API only."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

from antre_django.compat import TaskContext, task

CALLS: collections.Counter[str] = collections.Counter()  # effects seen in this process


@task
def add(a: int, b: int) -> int:
    CALLS[f"add:{a}:{b}"] += 1
    return a + b


@task(queue_name="emails", key=lambda to, subject: f"email:{to}:{subject}")
def send_email(to: str, subject: str) -> dict[str, str]:
    CALLS[f"email:{to}"] += 1
    return {"to": to, "subject": subject}


@task
def charge(order_id: int) -> None:
    raise ValueError(f"card declined for order {order_id}")


@task(takes_context=True)
def whoami(context: TaskContext, tag: str) -> dict[str, Any]:
    return {"tag": tag, "attempt": context.attempt, "id": context.task_result.id}


@task
def returns_a_date() -> Any:
    import datetime
    CALLS["returns_a_date"] += 1
    return datetime.date(2026, 12, 1)


@task
def write_file(path: str, text: str) -> str:
    Path(path).write_text(text)
    return text


async def a_coroutine() -> None:
    """Not a task: the backend refuses coroutine functions."""
