-- gates_declare: a worker declares the flow limits of the handlers it serves in this queue
-- ("Limit gates" in _lib.lua), replacing the last declaration.
-- KEYS[1] candidates (HASH job type -> its gates 'type:<t>[ ds:<name>]')
-- KEYS[2] slots (HASH gate -> n)   KEYS[3] rates (HASH gate -> '<n>/<window ms>')
-- KEYS[4] active gates (HASH job type -> the gates with a limit; what reserve reads)
-- ARGV[1] job_prefix   ARGV[2] now_ms   ARGV[3] JSON {cand: {type: gates}, conc: {gate: n},
-- rate: {gate: 'n/w'}}
-- Operators' overrides ('<tag>:lover') are kept: a gate they limit stays active.
-- Returns: how many waiting jobs a raised or removed limit started.
local prefix, now = ARGV[1], tonumber(ARGV[2])
local d = cjson.decode(ARGV[3])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
for t, gates in pairs(d.cand or {}) do redis.call('HSET', KEYS[1], t, gates) end
for gate, n in pairs(d.conc or {}) do redis.call('HSET', KEYS[2], gate, n) end
for gate, r in pairs(d.rate or {}) do redis.call('HSET', KEYS[3], gate, r) end
return gate_regate(prefix, now)
