-- flow_close: an open batch is closed (antre/flows/ Batch.close): no job is added from now on,
-- and once every member has settled its callbacks run (see _flows.lua: the 'open'
-- field holds them back until then, even when the members settled first).
-- KEYS[1] the flow (HASH)
-- ARGV[1] job_prefix   ARGV[2] now_ms
-- Returns: the flow's state after closing it ('running', 'succeeded', ...), or 'GONE'.
local prefix, now = ARGV[1], tonumber(ARGV[2])
local fk = KEYS[1]
local state = redis.call('HGET', fk, 'state')
if not state then return 'GONE' end
if redis.call('HGET', fk, 'open') == '1' then
  redis.call('HSET', fk, 'open', '0', 'closed_at', now)
  flow_check(prefix, fk, string.sub(fk, #tag_of(prefix) + #K.flow + 1), now)
end
return redis.call('HGET', fk, 'state')
