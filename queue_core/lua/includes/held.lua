--@include
--[[
  held: what the partition's live holding areas (undo, includes/hold.lua) hold, for the memory
  budget (budget.lua): hold_save keeps P.usage "held|<hold key>" = "<messages>|<bytes>", and the
  live areas are P.holds' members (engine/undo.py writes them when it opens an area:
  "<group>|<hold>" -> ms it is kept until).
]]

local HELD_READ = 64   -- live holding areas summed per check (the first to expire)

-- The key of group `group`'s holding area `area` (keys.hold_key).
local function hold_area_key(group, area)
  return string.sub(P.holds, 1, #P.holds - #'holds') .. 'g:' .. group .. ':hold:' .. area
end

local function held_area_field(group, area)
  return 'held|' .. hold_area_key(group, area)
end

-- Bytes of held records one call reads at most (1 MB payloads: ~2 a call, a few ms each): undo
-- and the index's listing of held messages read an area this way (docs/design.md).
local HELD_CALL_BYTES = 2 * 1024 * 1024

-- The fields of holding area `key` from HSCAN `cursor` on: {field, value, ...} of at most `count`
-- fields and HELD_CALL_BYTES of values, and the next cursor ('0': the area is read). HSCAN COUNT 1
-- reads about one bucket: the byte cap is checked between buckets, never after 100 large blobs
-- were loaded at once. An area small enough to be a listpack comes whole (small values).
local function held_rows(key, cursor, count)
  local rows, seen, bytes, steps = {}, 0, 0, 0
  repeat
    local scan = redis.call('HSCAN', key, cursor, 'COUNT', 1)
    cursor, steps = scan[1], steps + 1
    for i = 1, #scan[2], 2 do
      rows[#rows + 1], rows[#rows + 2] = scan[2][i], scan[2][i + 1]
      bytes, seen = bytes + #scan[2][i + 1], seen + 1
    end
  until cursor == '0' or seen >= count or bytes >= HELD_CALL_BYTES or steps >= 10 * count
  return cursor, rows
end

-- hold_save: the area `key` now holds n messages of b bytes. Drops a few expired areas' fields.
local function usage_held(key, n, b, ts)
  -- pcall as hold_save's own write: under maxmemory a removal must still finish (the count is lost)
  if type(redis.pcall('HSET', P.usage, 'held|' .. key, n .. '|' .. b)) == 'table' then return end
  local gone = redis.call('ZRANGEBYSCORE', P.holds, '-inf', '(' .. ts, 'LIMIT', 0, 16)
  if #gone == 0 then return end
  local fields = {}
  for i, m in ipairs(gone) do fields[i] = held_area_field(string.match(m, '^([^|]*)|(.*)$')) end
  redis.call('HDEL', P.usage, unpack(fields))
end

-- Messages and bytes held in the partition's live holding areas (at most HELD_READ of them).
local function usage_held_sum(ts)
  local live = redis.call('ZRANGEBYSCORE', P.holds, ts, '+inf', 'LIMIT', 0, HELD_READ)
  if #live == 0 then return 0, 0 end
  local fields = {}
  for i, m in ipairs(live) do fields[i] = held_area_field(string.match(m, '^([^|]*)|(.*)$')) end
  local n, b = 0, 0
  for _, v in ipairs(redis.call('HMGET', P.usage, unpack(fields))) do
    local vn, vb = string.match(v or '', '^(%d+)|(%d+)$')
    if vn then n, b = n + tonumber(vn), b + tonumber(vb) end
  end
  return n, b
end
