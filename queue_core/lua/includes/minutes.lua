-- Per-minute counters of a group: the dashboard's throughput figures and the alerts' lateness
-- (DelayQueue.throughput() and lateness()).

local function count_minute(gk, ts, event, n)
  if n > 0 then redis.call('HINCRBY', gk.minutes, math.floor(ts / 60000) .. ':' .. event, n) end
end

-- Drop counters older than an hour; runs from claim's upkeep, at most once per minute, and only
-- reads the field names when the hash holds more than a few minutes' worth (three events and up
-- to 16 lateness buckets a minute).
local function prune_minutes(gk, ts)
  local minute = math.floor(ts / 60000)
  if redis.call('HGET', gk.stats, 'minutes_pruned') == tostring(minute) then return end
  redis.call('HSET', gk.stats, 'minutes_pruned', minute)
  if redis.call('HLEN', gk.minutes) <= 200 then return end
  for _, field in ipairs(redis.call('HKEYS', gk.minutes)) do
    local m = tonumber(string.match(field, '^(%d+):'))
    if not m or m < minute - 61 then redis.call('HDEL', gk.minutes, field) end
  end
end
