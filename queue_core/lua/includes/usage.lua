--@include
--[[
  usage: the exact bytes of a partition's message store, P.usage "bytes", which the bytes budget
  (budget.lua) reads instead of sampling MEMORY USAGE (a sample of the first records reads a store
  of many small records then a few huge ones as small). A record costs its id, its value (header
  and payload) and RECORD_OVERHEAD_BYTES (keys.py). Every script that writes, rewrites or deletes
  a record adds the difference, one HINCRBY per call.

  The field exists only while it is exact and the topic has a bytes budget: budget.lua starts it
  at 0 when a publish writes into an empty store of such a topic (configure_topic drops it with
  the budget). A partition that held records before stays without one until a publish finds its
  store empty; until then budget.lua falls back to MEMORY USAGE (docs/design.md).

  Only what every script that writes or deletes records needs is here (leave.lua takes it into
  most scripts, whose main functions may hold at most 200 locals): budget.lua starts and reads
  the count, held.lua keeps the holding areas' sizes.
]]

local USAGE_FIELD = 'bytes'

local function record_cost(id, record_len) return #id + record_len + RECORD_OVERHEAD_BYTES end

-- Adds `delta` bytes (negative: fewer) when the count is kept.
local function usage_add(delta)
  if delta == 0 or redis.call('HEXISTS', P.usage, USAGE_FIELD) == 0 then return end
  redis.call('HINCRBY', P.usage, USAGE_FIELD, delta)
end

-- Call before records `ids` are deleted from the store: their bytes leave the count (when kept).
local function usage_leave(ids)
  if redis.call('HEXISTS', P.usage, USAGE_FIELD) == 0 then return end
  local total = 0
  for _, id in ipairs(ids) do
    local len = redis.call('HSTRLEN', P.msgs, id)
    if len > 0 then total = total + record_cost(id, len) end
  end
  if total > 0 then redis.call('HINCRBY', P.usage, USAGE_FIELD, -total) end
end
