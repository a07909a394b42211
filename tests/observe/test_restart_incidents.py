"""Worker processes restarted, by cause: the incident view names the cause and what to change."""

from __future__ import annotations

from antre.observe.incidents import RESTARTS_WINDOW_MS, incident_view
from antre.observe.registry import WorkerRegistry


def _restart_incidents(r, clock):
    return [i for i in incident_view(r, clock).open if i.kind == "worker_restarts"]


def test_restarts_after_a_hard_timeout_name_the_handler_and_the_remedy(r, clock):
    reg = WorkerRegistry(r, clock)
    for n in range(3):
        reg.record_restart(f"h:{n}", "h", "hard_timeout", job_type="report", timeout_s=90)
    reg.record_restart("sup/0", "h", "killed")
    found = {i.id: i for i in _restart_incidents(r, clock)}
    assert set(found) == {"worker_restarts|hard_timeout|report", "worker_restarts|killed|"}
    inc = found["worker_restarts|hard_timeout|report"]
    assert inc.value == 3 and inc.severity == "major" and inc.title == "Worker processes restarting"
    assert "handler report exceeds its timeout of 90 s" in inc.message
    assert inc.remedy.label == "Raise timeout_s of report or fix the handler (give its calls a timeout)"
    assert "Leases" not in inc.title + inc.message
    assert "killed by a signal" in found["worker_restarts|killed|"].message


def test_restarts_older_than_the_window_are_no_incident(r, clock):
    WorkerRegistry(r, clock).record_restart("h:1", "h", "hard_timeout", job_type="report",
                                            timeout_s=90)
    assert len(_restart_incidents(r, clock)) == 1
    clock.advance(RESTARTS_WINDOW_MS + 1)
    assert _restart_incidents(r, clock) == []
    assert WorkerRegistry(r, clock).restart_counts() == {("hard_timeout", "report"): 1}
