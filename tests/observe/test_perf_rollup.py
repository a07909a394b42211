"""The performance pages' coarse slots (bench/results/render.md): the 6-hour and daily slots
written with the hours hold exactly their sums, so the 24 h and 7 d figures read from the
``cover`` (at most 22 slots for a week instead of 168) equal the figures summed from the
hourly slots, whatever the time of day; a coarse slot that does not exist (data written before
them) is read from its hours; and they stay bounded (each expires by itself)."""

from __future__ import annotations

import random

import pytest

from antre.clock import ManualClock
from antre.engine import keys
from antre.observe import perf
from antre.observe.metrics import DurationBuffer

H = 3_600_000
D = 24 * H
TYPES = ("email", "sms", "charge")
QUEUES = ("default", "bulk")


def write_week(r, now: int, seed: int = 7) -> None:
    """Runs of three types in two queues at random times over the last 8 days, written as a
    worker writes them (``record_run`` then one flush per batch)."""
    rnd = random.Random(seed)
    for _ in range(60):
        buf = DurationBuffer()
        at = now - rnd.randrange(0, 8 * D)
        for _ in range(rnd.randrange(1, 30)):
            perf.record_run(buf, rnd.choice(QUEUES), rnd.choice(TYPES), at + rnd.randrange(0, 600),
                            rnd.choice((3, 40, 900, 12_000, 5_000_000)),
                            rnd.choice((0, 7, 2_000)), rnd.random() < 0.2)
        buf.flush(r)
    for q in QUEUES:
        r.sadd(keys.queues_index(), q)
        r.sadd(keys.QueueKeys(q).types, *TYPES)


def fine_figures(r, window: str, now: int, job_type: str,
                 queues: tuple[str, ...] = QUEUES) -> perf.Figures:
    """The reference: the window's every hourly (or 5-minute) slot summed, as the pages did
    before the coarse slots existed."""
    res, span = perf.WINDOWS[window]
    first, last = perf.slot_of(res, now - span), perf.slot_of(res, now)
    total = perf._Sums()
    for q in queues:
        for slot in range(first + 1, last + 1):
            values = r.hmget(keys.QueueKeys(q).perf(res, slot), perf.type_fields(job_type))
            total.add_values(values)
    return total.figures()


# noon, late evening, just past midnight, 5 h 59 m into a 6-hour slot
@pytest.mark.parametrize("offset_ms", [12 * H, 23 * H + 59 * 60_000, 60_000, 5 * H + 59 * 60_000])
def test_the_coarse_figures_equal_the_fine_ones(r, offset_ms):
    clock = ManualClock(1_700_000_000_000 // D * D + offset_ms)
    now = clock()
    write_week(r, now)
    p = perf.Perf(r, clock)
    for window in ("1h", "24h", "7d"):
        rows = {row.job_type: row for row in p.summary(window)}
        for t in TYPES:
            fine = fine_figures(r, window, now, t)
            assert (rows[t].figures if t in rows else None) == (fine if fine.runs else None)
    for selected in ("1h", "24h", "7d"):
        for t in TYPES:
            page = p.type_perf(t, selected)
            for window in ("1h", "24h", "7d"):
                assert page.windows[window] == fine_figures(r, window, now, t), (selected,
                                                                                 window)
        page = p.type_perf("email", selected, queue="bulk")
        assert page.selected == fine_figures(r, selected, now, "email", ("bulk",))
    assert sum(fine_figures(r, "7d", now, t).runs for t in TYPES) > 100  # data was there


def test_the_cover_tiles_the_hours_exactly_in_at_most_22_slots():
    for offset_h in range(0, 48):
        now = 1_700_000_000_000 // D * D + offset_h * H + 1_234
        p = perf.Perf(None, lambda: now)  # type: ignore[arg-type]
        for window in ("24h", "7d"):
            hours = p._slots(window, now)[1]
            cov = p._cover(window, now)
            tiled = [h for res, slot in cov for h in perf.hours_of(res, slot)]
            assert tiled == hours
            assert len(cov) <= (22 if window == "7d" else 14)
    with pytest.raises(ValueError):
        perf.cover(H + 1, 2 * H)


def test_a_coarse_slot_missing_is_read_from_its_hours(r):
    clock = ManualClock(1_700_000_000_000 // D * D + 15 * H)
    now = clock()
    write_week(r, now, seed=11)
    # as if the hours had been written by workers older than the coarse slots
    for q in QUEUES:
        qk = keys.QueueKeys(q)
        for res in ("q", "d"):
            last = perf.slot_of(res, now)
            r.delete(*[qk.perf(res, s) for s in range(last - 10, last + 1)])
    p = perf.Perf(r, clock)
    rows = {row.job_type: row.figures for row in p.summary("7d")}
    for t in TYPES:
        assert rows[t] == fine_figures(r, "7d", now, t)
        assert p.type_perf(t, "24h").windows["7d"] == fine_figures(r, "7d", now, t)


def test_coarse_slots_are_bounded_and_expire(r):
    clock = ManualClock(1_700_000_000_000 // D * D + 3 * H)
    now = clock()
    buf = DurationBuffer()
    for i in range(5_000):
        perf.record_run(buf, "default", "email", now, i, i, i % 3 == 0)
    buf.flush(r)
    qk = keys.QueueKeys("default")
    fine, six, day = (qk.perf(res, perf.slot_of(res, now)) for res in ("h", "q", "d"))
    assert r.hgetall(six) == r.hgetall(fine) == r.hgetall(day)  # one hour so far: its sums
    assert r.hlen(day) <= 4 + 2 * len(perf.BUCKET_NAMES)
    for key, res in ((six, "q"), (day, "d")):
        slot_end = perf.slot_of(res, now) * perf.SLOT_MS[res] + perf.KEEP_MS[res] - now
        assert 0 < r.pttl(key) <= slot_end <= 8 * D
