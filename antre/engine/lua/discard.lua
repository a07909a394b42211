-- discard: dead -> gone.
-- KEYS[1] job   KEYS[2] dead   KEYS[3] stats
-- ARGV[1] id   ARGV[2] dead-by-type prefix   ARGV[3] dead-by-group prefix
-- KEYS[4] the job's timeline (optional)   KEYS[5] idempotency-key index (optional)
-- ARGV[4] now_ms   ARGV[5] actor   ARGV[6] the caller's event details as JSON ('')
-- ARGV[7] keep the timeline this many ms after the job is gone (it ends with 'discarded')
-- A record that is not a hash but whose id is in the dead-letter queue is removed from it.
-- Returns: 1 discarded, 0 the job is not in the dead-letter queue (nothing changed).
local id = ARGV[1]
local f = redis.pcall('HMGET', KEYS[1], 'state', 'type', 'group')
if f.err then
  if not redis.call('ZSCORE', KEYS[2], id) then return 0 end
  f = {S.dead, nil, nil}
end
if f[1] ~= S.dead then return 0 end
redis.call('ZREM', KEYS[2], id)
redis.call('ZREM', ARGV[2] .. ((f[2] and f[2] ~= '') and f[2] or '(unknown)'), id)
redis.call('ZREM', ARGV[3] .. (f[3] or ''), id)
if KEYS[4] then
  tl_pending(KEYS[1], KEYS[4], nil)  -- (_lib.lua: a delivery's routine events)
  tl_add(KEYS[4], tonumber(ARGV[4]), 'discarded', ARGV[5] or '', {}, ARGV[6])
  redis.call('PEXPIRE', KEYS[4], tonumber(ARGV[7]))
end
if KEYS[5] then
  local ikey = redis.pcall('HGET', KEYS[1], 'idem_key')
  if type(ikey) == 'string' then unindex_key(KEYS[5], ikey, id) end
end
-- a member of a flow it held (policy fail / wait): the flow is given up (_flows.lua flow_gone)
flow_gone(KEYS[1], id, tonumber(ARGV[4]), 'discarded by ' .. ((ARGV[5] or '') ~= '' and ARGV[5] or '?'),
          KEYS[3])
redis.call('DEL', KEYS[1])
redis.call('HINCRBY', KEYS[3], 'discarded', 1)
return 1
