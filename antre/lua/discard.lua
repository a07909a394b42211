-- discard: dead -> gone.
-- KEYS[1] job   KEYS[2] dead   KEYS[3] stats
-- ARGV[1] id   ARGV[2] dead-by-type prefix   ARGV[3] dead-by-group prefix
-- Returns: 1 discarded, 0 the job is not in the dead-letter queue (nothing changed).
local id = ARGV[1]
local f = redis.call('HMGET', KEYS[1], 'state', 'type', 'group')
if f[1] ~= 'dead' then return 0 end
redis.call('ZREM', KEYS[2], id)
redis.call('ZREM', ARGV[2] .. ((f[2] and f[2] ~= '') and f[2] or '(unknown)'), id)
redis.call('ZREM', ARGV[3] .. (f[3] or ''), id)
redis.call('DEL', KEYS[1])
redis.call('HINCRBY', KEYS[3], 'discarded', 1)
return 1
