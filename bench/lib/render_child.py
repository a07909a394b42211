"""One side of ``dashboard_render.py``'s interleaved A/B run: the dashboard of the code on this
process's path (``PYTHONPATH=<tree>:<tree>/webapp:<tree>/worker``, ``bench/lib/tree.py``), on
the bench's Redis, logged in as an admin through the Flask test client. Reads one request a line
on stdin (JSON: ``{"m": "GET" | "POST", "url": ..., "data": {...}}``; a POST is an htmx one with
the CSRF token and a reason) and answers one line on stdout: ``{"ms": server time, "cpu_ms":
this process's CPU time for it, "status": ..., "bytes": ...}`` (the CPU time hardly depends on
the machine's load; Redis's own time is not in it).

    python3 bench/lib/render_child.py REDIS_URL SQLITE_DIR

Self-contained on purpose: it runs against older trees too (it imports only ``antre_web``).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]  # bench/lib/ shadows
    redis_url, tmp = sys.argv[1], sys.argv[2]
    from antre_web import create_app  # the tree on PYTHONPATH

    app = create_app({"ANTRE_REDIS_URL": redis_url,
                      "ANTRE_DATABASE_URL": f"sqlite:///{tmp}/antre.db",
                      "SECRET_KEY": "bench-only-session-key-8e1d4c7a2f9b6e3d0c5a"})
    app.extensions["antre"].users.add("op", "admin", "bench-password")
    web = app.test_client()
    page = web.get("/login").get_data(as_text=True)
    token = re.search(r'name="csrf-token" content="([^"]+)"', page).group(1)  # type: ignore
    resp = web.post("/login", data={"username": "op", "password": "bench-password",
                                    "csrf_token": token})
    assert resp.status_code == 302, resp.status_code
    with web.session_transaction() as s:
        csrf = s["csrf"]
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        t0, c0 = time.perf_counter(), time.process_time()
        if req["m"] == "GET":
            resp = web.get(req["url"])
        else:
            resp = web.post(req["url"], data={**req.get("data", {}), "csrf_token": csrf,
                                              "reason": "bench"},
                            headers={"HX-Request": "true"})
        body = resp.get_data()
        ms, cpu_ms = (time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000
        print(json.dumps({"ms": ms, "cpu_ms": cpu_ms, "status": resp.status_code,
                          "bytes": len(body),
                          "refused": b"not in the" in body}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
