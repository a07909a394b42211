"""Worker no-op drain of N jobs on a private Redis, for before/after comparisons of two trees:
run it with PYTHONPATH and the working directory set to each tree in turn.

    PYTHONPATH=$PWD python3 bench/experiments/noop_compare.py 20000
"""

from __future__ import annotations

import json
import sys

from antre.embedded import EmbeddedRedis
from bench.lib.antre_bench import worker_run


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    with EmbeddedRedis(tcp=True) as server:
        print(json.dumps(worker_run(server.url, n, procs=1, threads=4)))


if __name__ == "__main__":
    main()
