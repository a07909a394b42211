-- Shared helpers, prepended to every script by antre/engine/scripts.py (not a script of its own).
-- Job hashes live at job_prefix .. id; all keys of a queue share one hash tag, so the keys a
-- script derives from a prefix are in the slot of the keys it declares.
-- The names of the keys a script derives from a job prefix or a flow's key (keys.Tagged:
-- K.turns is 'kturn'), a job's states (antre/engine/states.py: S.dead is 'dead') and a flow's
-- (FS.running), written in here by scripts.py from their declarations: no script spells one.
local K = {--[[KEYS]]}
local S = {--[[JOB_STATES]]}
local FS = {--[[FLOW_STATES]]}
-- the records kept beside the job hashes (keys.RECORDS): each kind's name, Redis type and the
-- fields a hash of the kind always has (read through guard, _guard.lua: R.turns)
local R = {--[[RECORDS]]}

-- Its parts, each a file of its own, in the order they are defined (a part names only
-- those before it):

-- #include _base.lua
-- #include _timeline.lua
-- #include _guard.lua
-- #include _waiters.lua
-- #include _lines.lua
-- #include _gates.lua
-- #include _groups.lua
-- #include _turns.lua
-- #include _flows.lua
-- #include _burial.lua
-- #include _cancel.lua
-- #include _completion.lua
-- #include _records.lua
-- #include _failure.lua
-- #include _abandoned.lua
-- #include _reserve.lua
