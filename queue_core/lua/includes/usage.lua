--@include base
--[[
  usage: the exact bytes of a partition's message store, P.usage "bytes", which the bytes budget
  (budget.lua) reads instead of sampling MEMORY USAGE (a sample of the first records reads a store
  of many small records then a few huge ones as small). A record costs its id, its value (header
  and payload) and RECORD_OVERHEAD_BYTES (keys.py). Every script that writes, rewrites or deletes
  a record adds the difference, one HINCRBY per call.

  The field exists only while it is exact and the topic has a bytes budget: it starts at 0 when a
  publish writes into an empty store of such a topic (configure_topic drops it with the budget). A partition that held records before delayq kept it (an upgrade) has none until its store
  is empty once; until then budget.lua falls back to MEMORY USAGE (docs/design.md).

  Holding areas (undo, includes/hold.lua) count in the budget too: hold_save keeps P.usage
  "held|<hold key>" = "<messages>|<bytes>", and the live areas are P.holds' members (engine/undo.py
  writes them when it opens an area: "<group>|<hold>" -> ms it is kept until).
]]

local USAGE_FIELD = 'bytes'

local function record_cost(id, record_len) return #id + record_len + RECORD_OVERHEAD_BYTES end

-- The exact bytes of the store, or nil while they are not kept.
local function usage_bytes() return tonumber(redis.call('HGET', P.usage, USAGE_FIELD)) end

-- Call before writing records: an empty store of a topic with a bytes budget starts the count.
-- Only such a topic keeps one (the removal point pays an HSTRLEN per record while it is kept);
-- configure_topic drops it when the budget goes, so a topic without one pays an HEXISTS per
-- removal call and nothing at publish.
local function usage_start(tcfg)
  if (tonumber(tcfg.max_bytes) or 0) <= 0 or redis.call('HEXISTS', P.usage, USAGE_FIELD) == 1 then return end
  if redis.call('HLEN', P.msgs) - redis.call('HEXISTS', P.msgs, HASHTABLE_FIELD) == 0 then
    redis.call('HSET', P.usage, USAGE_FIELD, 0)
  end
end

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

local HELD_READ = 64   -- live holding areas summed per check (the first to expire)

local function held_field(group, area)
  return 'held|' .. string.sub(P.holds, 1, #P.holds - #'holds') .. 'g:' .. group .. ':hold:' .. area
end

-- hold_save: the area `key` now holds n messages of b bytes. Drops a few expired areas' fields.
local function usage_held(key, n, b, ts)
  redis.call('HSET', P.usage, 'held|' .. key, n .. '|' .. b)
  local gone = redis.call('ZRANGEBYSCORE', P.holds, '-inf', '(' .. ts, 'LIMIT', 0, 16)
  if #gone == 0 then return end
  local fields = {}
  for i, m in ipairs(gone) do fields[i] = held_field(string.match(m, '^([^|]*)|(.*)$')) end
  redis.call('HDEL', P.usage, unpack(fields))
end

-- Messages and bytes held in the partition's live holding areas (at most HELD_READ of them).
local function usage_held_sum(ts)
  local live = redis.call('ZRANGEBYSCORE', P.holds, ts, '+inf', 'LIMIT', 0, HELD_READ)
  if #live == 0 then return 0, 0 end
  local fields = {}
  for i, m in ipairs(live) do fields[i] = held_field(string.match(m, '^([^|]*)|(.*)$')) end
  local n, b = 0, 0
  for _, v in ipairs(redis.call('HMGET', P.usage, unpack(fields))) do
    local vn, vb = string.match(v or '', '^(%d+)|(%d+)$')
    if vn then n, b = n + tonumber(vn), b + tonumber(vb) end
  end
  return n, b
end
