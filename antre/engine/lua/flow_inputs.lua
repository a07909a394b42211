-- flow_inputs: what a job of a flow gets from its parents when it starts (the worker's one
-- read): their results, in the job's input order (see _flows.lua).
-- KEYS[1] the job (HASH)
-- ARGV[1] job_prefix
-- Returns: {flow id, result 1, result 2, ...}: each a result's JSON ('!' + JSON {job_id,
-- error}: a failure the flow ignored), false where none is stored; {} for a job of no flow.
local f = redis.pcall('HMGET', KEYS[1], 'flow', 'fpar')
if f.err or not f[1] or f[1] == '' then return {} end
local out = {f[1]}
local ok, parents = pcall(cjson.decode, f[2] or '[]')
if not ok or type(parents) ~= 'table' or #parents == 0 then return out end
local res = flow_key(ARGV[1], f[1]) .. K.flow_results
for i = 1, #parents, 1000 do  -- (unpack of a very long list would overflow Lua's stack)
  local got = redis.call('HMGET', res, unpack(parents, i, math.min(i + 999, #parents)))
  for j = 1, #got do out[#out + 1] = got[j] end
end
return out
