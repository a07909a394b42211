-- lock_release: compare-and-delete.
-- KEYS[1] lock   ARGV[1] token
-- Returns: 1 released, 0 not held by this token (nothing changed).
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
