"""Antre in a FastAPI (Starlette) app: the lifespan makes the producer and closes its
connections, a dependency hands it to the routes, which enqueue with ``await
antre.aenqueue(...)`` (redis.asyncio, one round trip) and read results with ``await
antre.aresult(...)``.

```sh
pip install antre fastapi uvicorn
uvicorn examples.fastapi_app:app                      # the web app: enqueues
antre worker examples.fastapi_app:worker              # the worker: runs the jobs
curl -X POST localhost:8000/orders/42/receipt -H 'content-type: application/json' \\
     -d '{"email": "a@example.org"}'
curl localhost:8000/results/receipt:42
```
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, TypedDict, cast

from fastapi import Depends, FastAPI, HTTPException, Request
from pydantic import BaseModel

from antre import Antre, InvalidJob, JobContext


def make_antre(**kwargs: Any) -> Antre:
    """The Antre app of both sides (``ANTRE_REDIS_URL``, ``ANTRE_DATABASE_URL``, or
    ``kwargs``), with its handlers: the web process only enqueues, the worker runs them."""
    antre = Antre(**kwargs)

    @antre.handler("send_receipt", max_attempts=5, timeout_s=30)
    def send_receipt(ctx: JobContext, payload: dict[str, Any]) -> dict[str, Any]:
        # ... send the e-mail; what it returns is the job's result
        return {"order_id": payload["order_id"], "sent_to": payload["email"]}

    return antre


worker = make_antre()  # for `antre worker examples.fastapi_app:worker` (connects on first use)


class State(TypedDict):
    antre: Antre


def get_antre(request: Request) -> Antre:
    """The dependency: the producer the lifespan made (``request.state`` is the lifespan's)."""
    return cast(Antre, request.state.antre)


AntreDep = Annotated[Antre, Depends(get_antre)]


class Receipt(BaseModel):
    email: str


def create_app(make: Callable[[], Antre] = make_antre) -> FastAPI:
    """The web app; ``make`` builds its Antre producer at startup."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[State]:
        antre = make()
        try:
            yield {"antre": antre}
        finally:  # at shutdown: the async client aenqueue used, the sync one aresult reads
            await antre.aredis.aclose()
            antre.redis.close()

    api = FastAPI(lifespan=lifespan)

    @api.post("/orders/{order_id}/receipt", status_code=202)
    async def send_receipt(order_id: int, body: Receipt, antre: AntreDep) -> dict[str, str]:
        key = f"receipt:{order_id}"  # names the effect: a re-sent request sends one receipt
        try:
            job_id = await antre.aenqueue("send_receipt",
                                          {"order_id": order_id, "email": body.email},
                                          idempotency_key=key)
        except InvalidJob as exc:
            raise HTTPException(status_code=422, detail=str(exc)) from None
        return {"job_id": job_id, "idempotency_key": key}

    @api.get("/results/{idempotency_key}")
    async def result(idempotency_key: str, antre: AntreDep) -> dict[str, Any]:
        answer = await antre.aresult(idempotency_key)
        if answer.status == "unknown":
            raise HTTPException(status_code=404, detail=f"no job for {idempotency_key!r}")
        return {"status": answer.status, "result": answer.result, "error": answer.error,
                "job_id": answer.job_id}

    return api


app = create_app()  # for `uvicorn examples.fastapi_app:app`
