"""The test-suite size of the flows fault run (``bench/flows_chaos``): 50 chords of
10 children run by a real worker pool (2 processes) while one worker process is killed with
kill -9 and every lease in flight is then cut short and swept (the killed worker's jobs come
back at once, the others are delivered twice). Every callback committed exactly once, none
lost, none early (it saw 10 results in order and its 10 children's committed rows), no child
effect twice. Its JSON goes to pytest's tmp_path (bench/results/flows-chaos.md is left alone)."""

from __future__ import annotations

import json


def test_fifty_chords_survive_a_kill_and_a_sweep(tmp_path):
    from bench import flows_chaos
    out = tmp_path / "flows-chaos.json"
    code = flows_chaos.main(["--flows", "50", "--script", "kill9,sweep", "--min-age", "0",
                             "--vt", "30", "--fail", "0.05", "--work-dir", str(tmp_path),
                             "--out", str(out), "--md", ""])
    res = json.loads(out.read_text())
    assert res["checks"] == {name: 0 for name in res["checks"]}, res
    assert code == 0
    assert res["faults"]["kill -9 of a worker process"] == 1
    assert res["faults"][flows_chaos.DUPLICATE] >= 1
    assert res["figures"]["callback rows committed"] == 50
    assert res["figures"]["child rows committed"] == 500
