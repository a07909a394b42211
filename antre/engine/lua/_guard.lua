-- The quarantine, and the guard every script reads the records beside the job hashes through.
-- Part of the scripts' shared library (_lib.lua lists the parts in order).

-- The quarantine (keys.QueueKeys.quarantine): a LIST of JSON entries, newest first, capped at
-- QUARANTINE_CAP, of what a script could not deal with as a job: an id that is not ASCII or
-- whose record is missing ({t, id (non-printable bytes as '?'), id_hex, why}; stats
-- 'quarantined'), and a damaged record beside the jobs ({t, record: its kind, key, type, why,
-- preview}; stats 'records_quarantined').
local QUARANTINE_CAP = 1000

local function bad_id(id)
  -- true for an id a client cannot decode: bytes outside ASCII
  return string.find(id, '[\128-\255]') ~= nil
end

local function printable(raw)
  local out = string.gsub(raw, '[^\32-\126]', '?')
  return out
end

local function quarantine(qkey, stats, now, id, why)
  local hex = string.gsub(id, '.', function(c) return string.format('%02x', string.byte(c)) end)
  redis.call('LPUSH', qkey, cjson.encode({t = now, id = printable(id), id_hex = hex, why = why}))
  redis.call('LTRIM', qkey, 0, QUARANTINE_CAP - 1)
  redis.call('HINCRBY', stats, 'quarantined', 1)
end


-- Records beside the job hashes (a lock key's turn and line, a group's slots and line, a
-- gate's, a flow's: keys.RECORDS, the table R) are read through guard(tag, key, R.<kind>, now)
-- before a helper touches one. A record of another Redis type, or a hash without the fields
-- its kind always has, is reported in the quarantine with what it was and removed; the
-- script then goes on as for a record that is not there, so no script that walks several jobs
-- stops half-way on it, and what waited on it moves on (a turn with no head passes, a slot
-- nobody holds is free, a flow's member with no flow settles alone). Returns true for a sound
-- (or absent) record, false for one it removed.
local function record_preview(key, t)
  if t == 'string' then return printable(string.sub(redis.call('GET', key), 1, 200)) end
  local size = ({list = 'LLEN', set = 'SCARD', zset = 'ZCARD', hash = 'HLEN',
                 stream = 'XLEN'})[t]
  return size and (t .. ' of ' .. redis.call(size, key)) or t
end

-- A key found sound is not looked at again in the same call (nothing but the script itself
-- writes meanwhile, and it writes each record as its type): ``guarded``, emptied at the start
-- of each call (guard_reset: the library's functions call it first; a script sent as EVALSHA
-- makes the table anew anyway).
local guarded = {}

local function guard_reset()
  guarded = {}
end

local function guard(tag, key, kind, now)
  -- ``kind``: its entry of R (R.turns)
  if guarded[key] then return true end
  guarded[key] = true  -- (sound, or about to be removed: absent is sound)
  local t = redis.call('TYPE', key)['ok']
  if t == 'none' then return true end
  local why
  if t ~= kind.type then
    why = 'a ' .. t .. ', not a ' .. kind.type
  elseif #kind.fields > 0 then
    local f = redis.call('HMGET', key, unpack(kind.fields))
    for i, name in ipairs(kind.fields) do
      if not f[i] then why = 'a hash without its field ' .. name break end
    end
  end
  if not why then return true end
  local qkey = tag .. K.quarantine
  redis.call('LPUSH', qkey, cjson.encode({t = now or 0, record = kind.name, key = printable(key),
                                          type = t, why = why,
                                          preview = record_preview(key, t)}))
  redis.call('LTRIM', qkey, 0, QUARANTINE_CAP - 1)
  redis.call('HINCRBY', tag .. K.stats, 'records_quarantined', 1)
  redis.call('HINCRBY', tag .. K.stats, 'abandoned', 1)  -- (the alert abandoned_records)
  redis.call('DEL', key)
  return false
end

local function guard_turn(tag, lk, now)
  -- a lock key's records: its head, its line, the index of waiting jobs
  guard(tag, tag .. K.turns, R.turns, now)
  guard(tag, tag .. K.line .. lk, R.line, now)
  guard(tag, tag .. K.waiting, R.waiting, now)
end

local function guard_group(tag, g, now)
  -- a group's records: its slots, its line, its rate's starts, the Groups page's indexes,
  -- the operators' overrides, the index of waiting jobs; false when its slots were removed
  local sound = guard(tag, tag .. K.group_held .. g, R.group_held, now)
  guard(tag, tag .. K.group_line .. g, R.group_line, now)
  guard(tag, tag .. K.group_rate .. g, R.group_rate, now)
  guard(tag, tag .. K.group_slots, R.group_slots, now)
  guard(tag, tag .. K.group_waiting, R.group_waiting, now)
  guard(tag, tag .. K.group_limits, R.group_limits, now)
  guard(tag, tag .. K.waiting, R.waiting, now)
  return sound
end

local function guard_gates(tag, gates, now)
  -- the records of each gate named in ``gates`` (space-separated)
  if not gates or gates == '' then return end
  guard(tag, tag .. K.waiting, R.waiting, now)
  guard(tag, tag .. K.gate_slots, R.gate_slots, now)
  guard(tag, tag .. K.gate_rates, R.gate_rates, now)
  guard(tag, tag .. K.gate_overrides, R.gate_overrides, now)
  for gate in string.gmatch(gates, '%S+') do
    guard(tag, tag .. K.gate_held .. gate, R.gate_held, now)
    guard(tag, tag .. K.gate_line .. gate, R.gate_line, now)
    guard(tag, tag .. K.gate_starts .. gate, R.gate_starts, now)
  end
end

local function guard_flow(tag, fk, now)
  -- a flow's records (``fk``: its hash): false when its hash was removed (the flow is gone)
  guard(tag, fk .. K.flow_results, R.flow_results, now)
  guard(tag, fk .. K.flow_failed, R.flow_failed, now)
  guard(tag, fk .. K.flow_jobs, R.flow_jobs, now)
  return guard(tag, fk, R.flow, now)
end

local function wrong_type(checks)
  -- ``checks``: {key, type, key, type, ...} (a nil key is passed over). An error reply naming
  -- the first key that holds another type, before the caller writes anything (a call that
  -- failed half-way would leave what it stored in no index), else nil
  for i = 1, #checks, 2 do
    local key = checks[i]
    if key then
      local t = redis.call('TYPE', key)['ok']
      if t ~= 'none' and t ~= checks[i + 1] then
        return redis.error_reply('WRONGTYPE ' .. printable(key) .. ' is a ' .. t .. ', not a ' ..
                                 checks[i + 1] .. ': nothing was stored')
      end
    end
  end
  return nil
end
