"""``examples/fastapi_app.py`` with FastAPI's own TestClient (which runs the lifespan), a real
Redis and a real burst worker."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from antre import Antre
from examples.fastapi_app import create_app, make_antre
from helpers import burst, wait_for


NAME = "fastapi-example"


def clients(r: Any) -> int:
    """The connections of the app's producer (named by its URL's ``client_name``)."""
    return sum(1 for c in r.client_list() if c.get("name") == NAME)


def named(redis_url: str) -> str:
    return f"{redis_url}{'&' if '?' in redis_url else '?'}client_name={NAME}"


def test_enqueue_in_a_route_run_by_a_worker_result_read_in_a_route(redis_url, r, clock):
    made: list[Antre] = []

    def make() -> Antre:
        made.append(make_antre(redis_url=named(redis_url)))
        return made[-1]

    with TestClient(create_app(make)) as client:
        assert len(made) == 1  # the lifespan made the producer at startup
        sent = client.post("/orders/42/receipt", json={"email": "a@example.org"})
        assert sent.status_code == 202, sent.text
        job_id = sent.json()["job_id"]
        assert sent.json()["idempotency_key"] == "receipt:42"
        assert client.get("/results/receipt:42").json()["status"] == "pending"
        assert client.get("/results/receipt:7").status_code == 404
        assert client.post("/orders/1/receipt", json={}).status_code == 422

        worker = make_antre(redis_url=redis_url, clock=clock)
        _, counts = burst(worker, clock)
        worker.redis.close()

        done = client.get("/results/receipt:42").json()
        assert done == {"status": "completed", "job_id": job_id, "error": "",
                        "result": {"order_id": 42, "sent_to": "a@example.org"}}
        assert clients(r) >= 2  # the app's own connections (async and sync), open while it runs
    # the lifespan closed them at shutdown
    wait_for(lambda: clients(r) == 0, what="the app's Redis connections to close")
    assert len(made) == 1


def test_the_dependency_hands_each_request_the_lifespans_producer(redis_url):
    made: list[Antre] = []

    def make() -> Antre:
        made.append(make_antre(redis_url=redis_url))
        return made[-1]

    app = create_app(make)
    with TestClient(app) as client:
        for order in (1, 2, 3):
            assert client.post(f"/orders/{order}/receipt",
                               json={"email": "b@example.org"}).status_code == 202
    assert len(made) == 1
    assert [made[0].job(j).state for j in [made[0].result(f"receipt:{o}").job_id
                                           for o in (1, 2, 3)]] == ["ready"] * 3
