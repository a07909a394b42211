"""Grafana and Prometheus out of the box (``deploy/``): every metric the alerting rules and the
dashboard's queries name exists in a real ``/metrics`` exposition of a queue that ran jobs, and
``promtool`` accepts the rules and the exposition."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers import burst

from antre.control.pause import Pauses
from antre.limits.admission import CircuitBreaker, Limits
from antre.observe.metrics import render
from antre.observe.registry import WorkerInfo, WorkerRegistry
from antre import Permanent, Retryable

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "antre-rules.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "antre-dashboard.json"
IN_CI = os.environ.get("CI", "").lower() == "true"
NAME = re.compile(r"\bantre_[a-z0-9_]+\b")
LINT_KNOWN = re.compile(r"^antre_(dlq_count|idempotency_hit_count_total|lock_conflict_count_total"
                        r"|retry_count_total) .*should")


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if IN_CI:
            pytest.fail("promtool is missing (CI=true: ./dev installs it from Debian's "
                        "prometheus package)")
        pytest.skip("promtool is not installed")
    return found


def exposition(app, clock) -> str:
    """``/metrics`` after real work: jobs acked, retried and buried by a worker (so the
    duration histograms exist), a pause, a breaker, a slot, a bucket, a supervisor."""
    @app.handler("ok")
    def ok(ctx, payload):
        return payload

    @app.handler("flaky", max_attempts=2)
    def flaky(ctx, payload):
        raise Retryable("down") if ctx.attempt == 1 else Permanent("still down")

    for i in range(3):
        app.enqueue("ok", {"i": i}, idempotency_key=f"ok:{i}")
    app.enqueue("flaky", {}, idempotency_key="flaky:1")
    burst(app, clock)
    clock.advance(60_000)
    burst(app, clock)
    reg = WorkerRegistry(app.redis, clock)
    reg.beat(WorkerInfo(id="sup-1", host="h", kind="supervisor", restarts=1))
    reg.beat(WorkerInfo(id="w-1", host="h", concurrency=10, loop_lag_ms=5, cache_hits=3,
                          cache_misses=1))
    CircuitBreaker(app.redis, "downstream:smtp", 1, 60, 30, clock).record_failure()
    flow = Limits(app.redis, clock)
    flow.semaphore("type:ok", 2).acquire("j:1", clock() + 1000)
    flow.rate_limiter("downstream:smtp", 5, 5).take()
    Pauses(app.redis, clock).pause("default", "ok", "alice", "incident")
    return render(app.redis, clock)[0].decode()


def exposed(text: str) -> set[str]:
    return {re.split(r"[{ ]", line, maxsplit=1)[0] for line in text.splitlines()
            if line and not line.startswith("#")}


def queries() -> list[str]:
    rules = [r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    dash = json.loads(DASHBOARD.read_text())
    targets = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    templating = [v["definition"] for v in dash["templating"]["list"] if "definition" in v]
    return rules + targets + templating


def unknown_metrics(exprs: list[str], names: set[str]) -> list[str]:
    return sorted({m for e in exprs for m in NAME.findall(e)} - names)


def test_every_metric_the_rules_and_the_dashboard_name_exists(app, clock):
    names = exposed(exposition(app, clock))
    assert {"antre_processing_duration_seconds_bucket", "antre_jobs_total"} <= names
    assert len(queries()) > 30
    assert unknown_metrics(queries(), names) == []


def test_the_check_catches_a_metric_that_does_not_exist():
    assert unknown_metrics(["rate(antre_jobs_totl[5m])"], {"antre_jobs_total"}) == [
        "antre_jobs_totl"]


def test_the_dashboard_is_importable_json_with_a_queue_variable():
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["panels"]
    assert {v["name"] for v in dash["templating"]["list"]} == {"datasource", "queue"}
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])


def test_promtool_accepts_the_rules_and_the_exposition(app, clock, tmp_path):
    tool = promtool()
    done = subprocess.run([tool, "check", "rules", str(RULES)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr
    lint = subprocess.run([tool, "check", "metrics"], input=exposition(app, clock),
                          capture_output=True, text=True, timeout=60)
    # exit 3: naming lints only (antre_dlq_count and antre_*_count_total predate the
    # convention; renaming them would break users' dashboards): the text must parse (exit 1)
    problems = [line for line in (lint.stdout + lint.stderr).splitlines() if line.strip()]
    assert lint.returncode in (0, 3), problems
    assert all(LINT_KNOWN.search(line) for line in problems), problems
