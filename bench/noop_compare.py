"""Worker no-op drain of N jobs on a private Redis (for before/after comparisons of two trees:
run it with PYTHONPATH and the working directory set to each tree).

    PYTHONPATH=$PWD python3 bench/noop_compare.py 20000
"""
import json, sys
from antre.embedded import EmbeddedRedis
from bench.antre_bench import worker_run
n = int(sys.argv[1])
with EmbeddedRedis(tcp=True) as s:
    out = worker_run(s.url, n, procs=1, threads=4)
print(json.dumps(out))
