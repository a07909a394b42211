-- purge: remove (or, on a dry run, only count) the jobs of one bounded chunk that match a
-- filter, from a ready/parked LIST or from the scheduled or dead ZSET.
-- KEYS[1] source (LIST or ZSET)   KEYS[2] stats (HASH)   KEYS[3] tombstones (STRING counter)
-- ARGV[1] job_prefix   ARGV[2] 'list' | 'zset'   ARGV[3] 1 = dry run (count only)
-- ARGV[4] filter JSON {id?, type?, group?, created_before?, field?, value?}
-- ARGV[5] list: the first id not yet looked at ('' = start at the oldest end);
--         zset: JSON array of candidate ids (read by the caller with ZRANGEBYSCORE ... LIMIT)
-- ARGV[6] list: how many ids to look at
-- ARGV[7] list: the cursor's distance from the oldest end when it was returned ('' unknown);
--         zset of the dead: the dead-by-type prefix   ARGV[8] zset of the dead: the
--         dead-by-group prefix (the per-type and per-group indexes are kept in step)
-- Returns: {looked at, matched, next cursor (list; '' = the end), its distance hint (list)}
-- (zset: the third value is the last id of the chunk still in the index, '' when none)
-- A list walk goes from the oldest end. A matched id is overwritten in place (LSET) with a
-- mark no job id can be ('{purged}' .. id: braces), which reserve.lua drops when it pops it
-- and KEYS[3] counts meanwhile (the ready count is the list's length minus the marks). No
-- command here scans the list element by element (an LREM would, up to its whole length):
-- the cursor is found again by its distance from the oldest end (LINDEX), and LPOS is only
-- the fallback when workers took jobs from that end since.
local prefix, mode, dry = ARGV[1], ARGV[2], ARGV[3] == '1'
local flt = cjson.decode(ARGV[4])

-- A purged job that held its lock_key's turn passes it (turn_end); the zset source
-- may be the waiting jobs' index, whose ids then go stale in their key's line (stepped over).
local now = nil
local function gone(id)
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  turn_end(prefix .. id, id, now)
  local waiters = redis.pcall('HGET', prefix .. id, 'waiters')  -- producers waiting
  if type(waiters) == 'string' then result_wake(prefix, id, waiters) end
  flow_gone(prefix .. id, id, now, 'purged', KEYS[2])  -- a member of a flow: gone
  forget_job(prefix, id)  -- the hash, its timeline, its idempotency-index entry
end

local function matches(id)
  if flt.id and id ~= flt.id then return false end
  if string.byte(id, 1) == 123 then return false end  -- a mark left by an earlier purge
  -- (a record that is not a hash never matches: reserve.lua or retention deal with it)
  local f = redis.pcall('HMGET', prefix .. id, 'type', 'group', 'created_at', 'payload')
  if f.err or not f[1] then return false end
  if flt.type and f[1] ~= flt.type then return false end
  if flt.group and f[2] ~= flt.group then return false end
  if flt.created_before and (tonumber(f[3] or '') or 0) > tonumber(flt.created_before) then
    return false
  end
  if flt.field then
    local ok, payload = pcall(cjson.decode, f[4] or '')
    if not ok or type(payload) ~= 'table' then return false end
    local v = payload[flt.field]
    if v == nil or v == cjson.null or type(v) == 'table' then return false end
    if type(v) == 'boolean' then v = v and 'true' or 'false' end
    if type(v) == 'number' and v == math.floor(v) then v = string.format('%d', v) end
    if tostring(v) ~= flt.value then return false end
  end
  return true
end

local function forget_dead(id)
  local f = redis.pcall('HMGET', prefix .. id, 'type', 'group')
  if f.err then f = {} end
  redis.call('ZREM', ARGV[7] .. ((f[1] and f[1] ~= '') and f[1] or '(unknown)'), id)
  redis.call('ZREM', ARGV[8] .. (f[2] or ''), id)
end

-- a source that is not of its type: the waiting jobs' index is a record beside the jobs
-- (guard: quarantined), any other is left to its readers; nothing in it is purged
if KEYS[1] == tag_of(prefix) .. K.waiting then guard(tag_of(prefix), KEYS[1], R.waiting) end
local source_type = redis.call('TYPE', KEYS[1])['ok']
if source_type ~= 'none' and source_type ~= (mode == 'zset' and 'zset' or 'list') then
  return {0, 0, '', ''}
end

if mode == 'zset' then
  local ids = cjson.decode(ARGV[5])
  local matched = 0
  local kept = ''
  for _, id in ipairs(ids) do
    if redis.call('ZSCORE', KEYS[1], id) and matches(id) then
      matched = matched + 1
      if not dry then
        if ARGV[7] and ARGV[7] ~= '' then forget_dead(id) end
        redis.call('ZREM', KEYS[1], id)
        gone(id)
      else
        kept = id
      end
    else
      kept = id
    end
  end
  if not dry and matched > 0 then redis.call('HINCRBY', KEYS[2], 'purged', matched) end
  return {#ids, matched, kept, ''}
end

local len = redis.call('LLEN', KEYS[1])
local pos = len
if ARGV[5] ~= '' then
  -- the hint (the cursor's distance from the oldest end when it was handed out) finds it
  -- without a search unless workers took jobs from that end meanwhile
  local hint = tonumber(ARGV[7] or '')
  if hint and hint < len and redis.call('LINDEX', KEYS[1], -(hint + 1)) == ARGV[5] then
    pos = len - hint
  else
    pos = redis.call('LPOS', KEYS[1], ARGV[5], 'RANK', -1)
    -- gone (reserved): every older id went before it, so what is left is all unexamined
    if not pos then pos = len else pos = pos + 1 end
  end
end
local lo = math.max(0, pos - tonumber(ARGV[6]))
if lo >= pos then return {0, 0, '', ''} end
local ids = redis.call('LRANGE', KEYS[1], lo, pos - 1)
local nxt = ''
if lo > 0 then nxt = redis.call('LINDEX', KEYS[1], lo - 1) end
local matched = 0
for i = #ids, 1, -1 do
  if matches(ids[i]) then
    matched = matched + 1
    if not dry then
      redis.call('LSET', KEYS[1], lo + i - 1, '{purged}' .. ids[i])
      gone(ids[i])
    end
  end
end
if not dry and matched > 0 then
  redis.call('INCRBY', KEYS[3], matched)
  redis.call('HINCRBY', KEYS[2], 'purged', matched)
end
-- nothing moved: nxt's distance from the oldest end is len - lo
local hint_out = ''
if nxt ~= '' then hint_out = tostring(len - lo) end
return {#ids, matched, nxt, hint_out}
