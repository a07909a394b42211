-- Job records that are not hashes: each becomes a dead job saying what was there.
-- Part of the scripts' shared library (_lib.lua lists the parts in order).

-- == Records that are not job hashes ================================================
-- A script that walks several jobs deals with a broken record alone, before it writes anything
-- for it, and never leaves its id in no list:
-- * an id that is not ASCII (no client could decode it, so it cannot be a dead job the pages
--   list) goes to the queue's quarantine (keys.QueueKeys.quarantine: a LIST of JSON entries
--   {t, id (non-printable bytes as '?'), id_hex, why}, newest first, capped at QUARANTINE_CAP;
--   stats 'quarantined' counts them), and so does an id whose record is missing;
-- * a record that is not a hash (a string, list, set, zset, stream) becomes a dead job saying
--   so: the old value is replaced by a hash (type '(unknown)', its field 'corrupt' keeps a
--   printable preview of what was there) buried with the reason, in the DLQ like any other.
local function bury_not_hash(prefix, id, now, actor, dlq)
  -- the record of ``id`` is not a hash (already taken out of its list): a dead job that says
  -- so. dlq: {dead, stats, errgroups, dead-by-type prefix, dead-by-group prefix}
  local key = prefix .. id
  local rtype = redis.call('TYPE', key).ok
  local preview = rtype
  if rtype == 'string' then
    preview = 'string: ' .. printable(redis.call('GETRANGE', key, 0, 999))
  end
  local reason = 'job record is a ' .. rtype .. ', not a hash (found by ' .. actor ..
                 '); the job cannot run: its field corrupt shows what was stored'
  redis.call('DEL', key)
  redis.call('HSET', key, 'id', id, 'type', '(unknown)', 'corrupt', preview,
             'error_kind', 'corrupt', 'last_error', reason, 'deadline', 0)
  bury_job(key, id, now, reason, 'corrupt: job record is a ' .. rtype .. ', not a hash',
           dlq[1], dlq[2], dlq[3], dlq[4], dlq[5])
  tl_add(tl_key(prefix, id), now, 'buried', actor, {reason = reason, kind = 'corrupt'})
end
