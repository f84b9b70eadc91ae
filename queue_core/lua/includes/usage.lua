--@include base
--[[
  usage: the exact bytes of a partition's message store, P.usage "bytes", which the bytes budget
  (budget.lua) reads instead of sampling MEMORY USAGE (a sample of the first records reads a store
  of many small records then a few huge ones as small). A record costs its id, its value (header
  and payload) and RECORD_OVERHEAD_BYTES (keys.py). Every script that writes, rewrites or deletes
  a record adds the difference, one HINCRBY per call.

  The field exists only while it is exact: it starts at 0 when a record is written into an empty
  store. A partition that held records before delayq kept it (an upgrade) has none until its store
  is empty once; until then budget.lua falls back to MEMORY USAGE (docs/design.md).
]]

local USAGE_FIELD = 'bytes'

local function record_cost(id, record_len) return #id + record_len + RECORD_OVERHEAD_BYTES end

-- The exact bytes of the store, or nil while they are not kept.
local function usage_bytes() return tonumber(redis.call('HGET', P.usage, USAGE_FIELD)) end

-- Call before writing records: an empty store starts the count.
local function usage_start()
  if redis.call('HEXISTS', P.usage, USAGE_FIELD) == 1 then return end
  if redis.call('HLEN', P.msgs) - redis.call('HEXISTS', P.msgs, HASHTABLE_FIELD) == 0 then
    redis.call('HSET', P.usage, USAGE_FIELD, 0)
  end
end

-- Adds `delta` bytes (negative: fewer) when the count is kept.
local function usage_add(delta)
  if delta == 0 or redis.call('HEXISTS', P.usage, USAGE_FIELD) == 0 then return end
  redis.call('HINCRBY', P.usage, USAGE_FIELD, delta)
end

-- Call before records `ids` are deleted from the store: their bytes leave the count. Returns false
-- when the count is not kept (the caller then calls usage_start() after the delete).
local function usage_leave(ids)
  if redis.call('HEXISTS', P.usage, USAGE_FIELD) == 0 then return false end
  local total = 0
  for _, id in ipairs(ids) do
    local len = redis.call('HSTRLEN', P.msgs, id)
    if len > 0 then total = total + record_cost(id, len) end
  end
  if total > 0 then redis.call('HINCRBY', P.usage, USAGE_FIELD, -total) end
  return true
end
