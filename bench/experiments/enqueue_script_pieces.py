"""Where the enqueue script's server time goes: variants of it, one server, interleaved.

    PYTHONPATH=$PWD python3 bench/experiments/enqueue_script_pieces.py

Each variant is loaded into one private Redis and called in pipelined blocks of 500 (one new
immediate job each, the arguments enqueue sends), blocks of all variants interleaved; server CPU
(``INFO cpu``) per call, median and minimum of 16 blocks. Variants: an empty script (EVALSHA's
own cost with these arguments), _lib.lua alone, decoding the job's JSON, the one HSET of its 18
fields, the whole script. The machine is shared: read the differences, not the absolutes.
"""
import os
import statistics
import sys

import redis
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from antre.embedded import EmbeddedRedis
from antre.engine.envelope import JobSpec, encode_new, pack_new
from antre.engine.keys import QueueKeys, queues_index
from antre.engine.scripts import source
lib = open(os.path.join(sys.path[0], 'antre/engine/lua/_lib.lua')).read()
enq = open(os.path.join(sys.path[0], 'antre/engine/lua/enqueue.lua')).read()
variants = {
 'return1': 'return 1',
 'lib+return1': lib + '\nreturn 1',
 'decode only': 'local v = cjson.decode(ARGV[4]) return 1',
 'decode + HSET 18': '''local v = cjson.decode(ARGV[4]) local f={} local N={'id', 'type', 'visible_at', 'queue', 'idem_key', 'payload', 'attempt','max_attempts', 'created_at', 'trace_id', 'lock_key', 'headers', 'timeout_s','vt_ms', 'epoch', 'deliveries', 'max_deliveries'}
for i=1,17 do f[2*i-1]=N[i] f[2*i]=v[i] end f[35]='state' f[36]='ready' redis.call('HSET', ARGV[1]..v[1], unpack(f)) return 1''',
 'full': source('enqueue'),  # what Redis runs: the _lib.lua definitions it uses + enqueue.lua
}
def cpu(c):
    i = c.info('cpu'); return float(i['used_cpu_user']) + float(i['used_cpu_sys'])
with EmbeddedRedis(appendonly=False) as s:
    c = redis.Redis.from_url(s.url)
    shas = {k: c.script_load(v) for k, v in variants.items()}
    k = QueueKeys('b'); now = 1_700_000_000_000
    res = {name: [] for name in variants}
    for b in range(16):
        for name, sha in shas.items():
            c.flushall()
            pipe = c.pipeline(transaction=False)
            for i in range(500):
                vals = encode_new(JobSpec('noop', {'i': i}, f'{name}{b}:{i}'), 'b', now)
                pipe.evalsha(sha, 6, k.ready, k.scheduled, k.stats, k.types, k.wake, queues_index(), k.job_prefix, now, '', pack_new(vals))
            t = cpu(c); pipe.execute(); res[name].append((cpu(c) - t) / 500 * 1e6)
    for name, v in res.items():
        print(f'{name:16} median {statistics.median(v):6.2f} us  min {min(v):6.2f}')
