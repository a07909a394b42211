"""The test-suite size of the multi-host fault run (``bench/cluster_chaos``): a
6-node Redis Cluster (3 masters + 3 replicas, AOF on) and two "hosts" (network namespaces,
each with its own worker pool), 300 jobs whose effects commit with their idempotency records
on a private PostgreSQL, while one host's link goes down for longer than the lease and comes
back, the queue's master is killed with kill -9 (its replica takes over) and PostgreSQL is
restarted. 0 lost, 0 duplicate committed effects, every job done, and nothing of the set-up left
behind (namespaces, bridge). Needs root and ``ip netns``: skipped without them, a failure under
CI=true. Its JSON goes to pytest's tmp_path (bench/results/cluster.md is left alone)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def _names() -> str:
    return (subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
            + subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout)


def test_two_hosts_survive_a_cut_link_a_master_kill_and_a_database_restart(tmp_path):
    from bench import cluster_chaos
    from bench.lib import cluster_harness
    why = cluster_harness.available() or (None if cluster_harness.pg_bin() else
                                          "no PostgreSQL server binaries (initdb, pg_ctl)")
    if why:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{why} (CI=true: missing services are failures, not skips)")
        pytest.skip(why)
    out = tmp_path / "cluster-chaos.json"
    code = cluster_chaos.main(["--jobs", "300", "--processes", "1", "--threads", "4",
                               "--vt", "2", "--work-ms", "5", "--backlog", "50",
                               "--script", "link,master,postgres", "--timeout", "80",
                               "--out", str(out), "--md", ""])
    res = json.loads(out.read_text())
    assert res["checks"] == {name: 0 for name in res["checks"]}, res
    assert code == 0
    assert res["figures"]["effects committed"] == 300
    assert set(res["faults"]) >= {"kill -9 of the queue's Redis master",
                                  "PostgreSQL restart (pg_ctl restart -m fast)"}
    assert any(name.startswith("host link down") for name in res["faults"])
    assert res["harness"] not in _names()  # its namespaces, veths and bridge are gone
