"""The performance pages: /types/ and /types/<job_type> render the figures
of known data, escape what Redis holds, link from the header and the overview; their JSON
twins; bad and unknown type names."""

from __future__ import annotations

from webtools import basic

from antre.engine import keys
from antre.observe import perf
from antre.observe.metrics import DurationBuffer


def write(web, job_type: str, runs: list[tuple[int, int, bool]], queue: str = "default",
          ago_ms: int = 60_000) -> None:
    buf = DurationBuffer()
    for d, w, failed in runs:
        perf.record_run(buf, queue, job_type, web.clock() - ago_ms, d, w, failed)
    buf.flush(web.producer.redis)
    web.producer.redis.sadd(keys.queues_index(), queue)
    web.producer.redis.sadd(keys.QueueKeys(queue).types, job_type)


def test_index_lists_types_with_their_figures_and_links(web):
    write(web, "send_email", [(8, 1, False)] * 9 + [(800, 1, True)])
    write(web, "resize", [(3_000, 20_000, False)] * 2, ago_ms=5 * 3_600_000)
    c = web.client("viewer")
    page = c.get("/types/").get_data(as_text=True)  # 24 h by default
    assert 'href="/types/send_email?window=24h"' in page and "<code>resize</code>" in page
    row = page[page.index('data-type="send_email"'):]
    row = row[:row.index("</tr>")]
    assert '<td data-label="Runs">10</td>' in row
    assert '<td data-label="Failures">1 <small>(10.0%)</small></td>' in row
    assert page.index('data-type="send_email"') < page.index('data-type="resize"')
    hour = c.get("/types/?window=1h").get_data(as_text=True)
    assert 'data-type="send_email"' in hour and 'data-type="resize"' not in hour
    assert 'aria-current="page">last hour<' in hour
    assert 'href="/types/"' in c.get("/").get_data(as_text=True)  # the header's More menu
    assert 'href="/types/send_email"' in c.get("/").get_data(as_text=True)  # overview


def test_type_page_shows_windows_histogram_and_markers(web):
    write(web, "send_email", [(8, 1, False)] * 9 + [(800, 1, True)])
    c = web.client("operator")
    page = c.get("/types/send_email?window=1h").get_data(as_text=True)
    for w in ("1h", "24h", "7d"):
        assert f'data-window="{w}"' in page
    assert 'class="chart" data-chart=' in page and "duration histogram" in page
    assert "<tr><td>10ms</td><td>9</td></tr>" in page  # the histogram as a table
    assert "<tr><td>1s</td><td>1</td></tr>" in page
    api = c.get("/api/types/send_email?window=1h", headers=basic("viewer")).get_json()
    assert api["windows"]["1h"]["runs"] == 10 and api["windows"]["1h"]["failures"] == 1
    assert api["windows"]["1h"]["duration_histogram"]["10"] == 9
    assert len(api["series"]) == 12 and sum(p["runs"] for p in api["series"]) == 10
    listing = c.get("/api/types?window=7d", headers=basic("viewer")).get_json()
    assert [(t["job_type"], t["runs"]) for t in listing["types"]] == [("send_email", 10)]


def test_operator_actions_are_markers(web):
    write(web, "send_email", [(8, 1, False)])
    c = web.client("operator")
    c.post("/api/queues/default/pause", json={"reason": "deploying"},
           headers=basic("operator"))
    page = c.get("/types/send_email").get_data(as_text=True)
    assert "operator: queue.pause default" in page


def test_bad_and_unknown_types_and_escaping(web):
    c = web.client("viewer")
    assert c.get("/types/no_such_type").status_code == 404
    assert c.get("/api/types/no_such_type", headers=basic("viewer")).status_code == 404
    assert c.get("/types/bad%20name").status_code == 400
    # a field written by something else: shown escaped, never as markup
    r = web.producer.redis
    slot = perf.slot_of("h", web.clock())
    r.hset(keys.QueueKeys("default").perf("h", slot), "<b>x</b>|runs", 3)
    r.zadd(keys.QueueKeys("default").perf_rank("h", slot), {"<b>x</b>": 3})
    r.sadd(keys.queues_index(), "default")
    r.sadd(keys.QueueKeys("default").types, "<b>x</b>")
    page = c.get("/types/").get_data(as_text=True)
    assert "&lt;b&gt;x&lt;/b&gt;" in page and "<b>x</b>" not in page
    assert c.get("/types/?window=bogus").status_code == 200  # an unknown window: 24 h


def test_the_index_shows_a_page_of_the_busiest_types_with_links_to_the_next(web):
    for i in range(60):
        write(web, f"job{i:02d}", [(8, 1, False)] * (1 + i % 5))
    c = web.client("viewer")
    got = c.get("/api/types?window=1h&limit=25", headers=basic("viewer")).get_json()
    assert (got["total"], got["offset"], got["limit"], len(got["types"])) == (60, 0, 25, 25)
    assert got["types"][0]["runs"] == 5
    rest = c.get("/api/types?window=1h&limit=25&offset=50", headers=basic("viewer")).get_json()
    assert len(rest["types"]) == 10 and rest["types"][-1]["runs"] == 1
    page = c.get("/types/?window=1h").get_data(as_text=True)
    assert "Types 1–50 of 60, busiest first." in page and 'rel="next"' in page
    assert page.count('data-type="') == 50
    assert c.get("/types/?limit=abc").status_code == 400
