-- checkpoint: store a running job's progress, only for the holder of the current lease.
-- A retried or re-delivered job starts with it as ctx.last_checkpoint.
-- KEYS[1] job   ARGV[1] epoch   ARGV[2] checkpoint JSON
-- KEYS[2] the job's timeline (optional)   ARGV[3] now_ms   ARGV[4] actor ('' = the job's worker)
-- Sets 'checkpoint_at' and records a 'checkpoint' event (size and the first 200 characters).
-- Returns: 'OK', or 'LOST:<why>' with nothing changed.
local lost = lease_error(KEYS[1], ARGV[1])
if lost then return lost end
redis.call('HSET', KEYS[1], 'checkpoint', ARGV[2])
if KEYS[2] then
  local now = tonumber(ARGV[3])
  redis.call('HSET', KEYS[1], 'checkpoint_at', now)
  tl_pending(KEYS[1], KEYS[2], nil)  -- the delivery's 'reserved' event first (_lib.lua)
  tl_add(KEYS[2], now, 'checkpoint', actor_of(KEYS[1], ARGV[4]),
         {bytes = #ARGV[2], preview = string.sub(ARGV[2], 1, 200)})
end
return 'OK'
