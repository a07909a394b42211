"""``when`` (every time on the dashboard): the exact ``<time>`` markup, built without
Markup.format (bench/results/render.md), for epoch ms, digit strings, datetimes and what is no
time."""

from __future__ import annotations

from datetime import datetime, timezone

from markupsafe import Markup

from antre_web.common import when


def test_when_writes_the_time_element_and_nothing_for_no_time():
    out = when(1_700_000_000_123)
    assert isinstance(out, Markup)
    assert out == ('<time class="when" datetime="2023-11-14T22:13:20.123000Z" '
                   'data-ms="1700000000123" title="2023-11-14 22:13:20 UTC" tabindex="0">'
                   '2023-11-14 22:13:20 UTC</time>')
    assert when("1700000000123") == out
    assert when(datetime(2023, 11, 14, 22, 13, 20, 123000)) == out  # naive: UTC
    assert when(datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=timezone.utc)) == out
    assert (when(0), when(-1), when(None), when(""), when("<b>")) == ("—", "—", "", "", "")
