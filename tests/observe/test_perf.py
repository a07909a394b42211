"""Per-type performance: figures computed from known data on an injected
clock, windows, the slots' bounded size (expiry relative to the writer's clock), deploy
markers, and a real worker's jobs counted."""

from __future__ import annotations

import pytest
from helpers import burst

from antre import Antre, Permanent
from antre.clock import ManualClock
from antre.engine import keys
from antre.observe import perf
from antre.observe.metrics import DurationBuffer
from antre.observe.registry import WorkerRegistry

H = 3_600_000


@pytest.fixture
def clock():
    return ManualClock(1_700_000_000_000 // H * H + 30 * 60_000)  # half past an hour


def write(r, at_ms: int, runs: list[tuple[int, int, bool]], job_type: str = "email",
          queue: str = "default") -> None:
    buf = DurationBuffer()
    for duration, wait, failed in runs:
        perf.record_run(buf, queue, job_type, at_ms, duration, wait, failed)
    buf.flush(r)
    r.sadd(keys.queues_index(), queue)
    r.sadd(keys.QueueKeys(queue).types, job_type)


def test_percentiles_from_known_histograms():
    counts = [0] * len(perf.BUCKET_NAMES)
    counts[1] = 100  # 100 runs in (5, 10] ms
    assert perf.percentile(counts, 0.5) == pytest.approx(7.5)
    assert perf.percentile(counts, 0.99) == pytest.approx(9.95)
    counts[-1] = 100  # and 100 past the last bound (an hour)
    assert perf.percentile(counts, 0.5) == pytest.approx(10.0)
    assert perf.percentile(counts, 0.99) == 3_600_000  # a lower bound
    assert perf.Quantiles.of(tuple(counts)).open_ended
    assert perf.percentile([0] * len(perf.BUCKET_NAMES), 0.5) is None


def test_figures_per_window_from_known_data(r, clock):
    now = clock()
    write(r, now - 10 * 60_000, [(8, 1, False)] * 90 + [(800, 40, True)] * 10)  # last hour
    write(r, now - 5 * H, [(8, 1, False)] * 100)  # within 24 h
    write(r, now - 3 * 24 * H, [(40_000, 2_000, True)] * 50)  # within 7 d
    write(r, now - 8 * 24 * H, [(8, 1, False)] * 1000)  # older than 7 d: never read
    p = perf.Perf(r, clock)
    page = p.type_perf("email", "24h")
    hour, day, week = (page.windows[w] for w in ("1h", "24h", "7d"))
    assert (hour.runs, hour.failures) == (100, 10)
    assert (day.runs, day.failures) == (200, 10)
    assert (week.runs, week.failures) == (250, 60)
    assert hour.failure_pct == 10.0
    assert hour.duration.p50 == pytest.approx(5 + 5 * 50 / 90)
    assert 500 < hour.duration.p95 <= 1000  # the failures' bucket (500, 1000]
    assert hour.wait.p50 == pytest.approx(5 * 50 / 90)  # in (0, 5] ms, linear
    assert week.duration.p99 > 30_000 and week.duration_sum_ms == 50 * 40_000 + 190 * 8 + 8_000
    assert sum(day.duration_hist) == 200
    # the selected window's series: one point per hour, the runs where they were written
    assert len(page.series) == 24 and sum(pt.runs for pt in page.series) == 200
    assert [pt.t for pt in page.series] == sorted(pt.t for pt in page.series)
    rows = p.summary("7d")
    assert [(row.job_type, row.queues, row.figures.runs) for row in rows] == [
        ("email", ("default",), 250)]


def test_the_index_covers_every_type_and_queue_busiest_first(r, clock):
    now = clock()
    write(r, now, [(8, 1, False)] * 3, job_type="sms")
    write(r, now, [(8, 1, False)] * 5, job_type="email")
    write(r, now, [(8, 1, False)] * 4, job_type="email", queue="bulk")
    rows = perf.Perf(r, clock).summary("1h")
    assert [(row.job_type, row.queues, row.figures.runs) for row in rows] == [
        ("email", ("bulk", "default"), 9), ("sms", ("default",), 3)]
    page = perf.Perf(r, clock).type_perf("email", "1h", queue="bulk")
    assert page.queues == ("bulk",) and page.selected.runs == 4


def test_slots_are_bounded_and_expire_relative_to_the_writer_clock(r, clock):
    now = clock()
    for job_type in ("a", "b"):
        write(r, now, [(d, d, d % 2 == 0) for d in range(0, 5_000_000, 997)],
              job_type=job_type)
    k = keys.QueueKeys("default")
    m, h = k.perf("m", perf.slot_of("m", now)), k.perf("h", perf.slot_of("h", now))
    # however many runs: per type at most runs, fail, two sums and two histograms
    assert r.hlen(h) <= 2 * (4 + 2 * len(perf.BUCKET_NAMES))
    assert r.hlen(m) == r.hlen(h)
    slot_end_h = (perf.slot_of("h", now) * H) + perf.KEEP_MS["h"] - now
    assert 0 < r.pttl(h) <= slot_end_h <= 7 * 24 * H + H
    assert 0 < r.pttl(m) <= 2 * H
    # an old slot is gone a week (+ an hour) after it ended, whenever it was written last
    old_slot = perf.slot_of("h", now) - 7 * 24
    write(r, old_slot * H + 10, [(5, 1, False)])
    assert r.pttl(k.perf("h", old_slot)) <= perf.KEEP_MS["h"]
    clock.advance(10)
    # the readers look at the window's slots only: 12 five-minute slots, 24 or 168 hours
    p = perf.Perf(r, clock)
    assert [len(p._slots(w, clock())[1]) for w in ("1h", "24h", "7d")] == [12, 24, 168]


def test_deploy_markers_only_when_the_code_version_changes(r, clock):
    reg = WorkerRegistry(r, clock)
    for version, worker in (("v1", "w1"), ("v1", "w2"), ("v2", "w3"), ("v2", "w4")):
        reg.record_start(worker, "host", version)
        clock.advance(60_000)
    marks = perf.Perf(r, clock).deploys(0)
    assert [(m.kind, m.text) for m in marks] == [
        ("deploy", "workers on v1 (first: w1)"), ("deploy", "workers on v2 (first: w3)")]
    assert perf.Perf(r, clock).deploys(clock() - 150_000)[0].text.startswith("workers on v2")


def test_a_real_worker_counts_runs_failures_and_a_deploy(redis_url, clock):
    app = Antre(redis_url=redis_url, clock=clock)

    @app.handler("resize")
    def resize(ctx, payload):  # type: ignore[no-untyped-def]
        if payload["i"] % 4 == 0:
            raise Permanent("bad image")
        return {}
    for i in range(12):
        app.enqueue("resize", {"i": i}, idempotency_key=f"img:{i}")
    clock.advance(2_000)  # they waited two seconds before a worker took them
    burst(app, clock)
    page = perf.Perf(app.redis, clock).type_perf("resize", "1h")
    assert (page.selected.runs, page.selected.failures) == (12, 3)
    assert 1_000 < page.selected.wait.p50 <= 2_500  # the (1000, 2500] bucket
    assert [m.kind for m in page.markers] == ["deploy"]
    assert page.markers[0].text.startswith("workers on code ")


def _calls(r) -> int:
    return sum(v["calls"] for k, v in r.info("commandstats").items() if k != "cmdstat_info")


def _many(r, at_ms: int, count: int, start: int = 0) -> None:
    buf = DurationBuffer()
    for i in range(start, start + count):
        perf.record_run(buf, "default", f"t{i:05d}", at_ms, 8, 1, False)
        for _ in range(i % 7):
            perf.record_run(buf, "default", f"t{i:05d}", at_ms, 8, 1, False)
    buf.flush(r)
    r.sadd(keys.queues_index(), "default")
    r.sadd(keys.QueueKeys("default").types, *[f"t{i:05d}" for i in range(start, start + count)])


@pytest.mark.parametrize("window", ["1h", "24h", "7d"])
def test_the_index_reads_as_many_commands_for_ten_types_shown_of_400_as_of_40(r, clock,
                                                                            window):
    now = clock()
    _many(r, now - 10 * 60_000, 40)
    p = perf.Perf(r, clock)
    before = _calls(r)
    small = p.page(window, limit=10)
    few = _calls(r) - before
    _many(r, now - 10 * 60_000, 360, start=40)
    before = _calls(r)
    big = p.page(window, limit=10)
    many = _calls(r) - before
    assert few == many  # the cost is the types shown, not the types that exist
    assert (small.total, big.total, len(big.rows)) == (40, 400, 10)
    runs = [row.figures.runs for row in big.rows]
    assert runs == sorted(runs, reverse=True) and runs[0] == 7  # the busiest first


def test_the_index_pages_through_every_type_busiest_first(r, clock):
    _many(r, clock() - 10 * 60_000, 30)
    p = perf.Perf(r, clock)
    seen, offset = [], 0
    while offset is not None:
        page = p.page("1h", limit=7, offset=offset)
        seen += [(row.figures.runs, row.job_type) for row in page.rows]
        offset = page.next_offset
    assert len(seen) == 30 and len(set(seen)) == 30
    assert seen == sorted(seen, key=lambda x: (-x[0], x[1]))
