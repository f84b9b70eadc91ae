--@include base
--[[
  due_forecast: how many messages of one state of one group are due before each of a run of
  evenly spaced times, as one atomic snapshot of that set: the caller turns neighbouring counts
  into counts per bucket, so one ZCOUNT per bucket edge (each O(log n): the walk to the edge; the
  walk to '-inf' is the set's head) instead of two walks per bucket. Read only. A call reads at
  most 1,024 buckets; the caller sends runs of 256 (~2 ms of Redis at 10 M members,
  bench.forecast), a longer horizon as several calls (Redis serves others between them). Backs DelayQueue.due_forecast().

  KEYS: the partition's keys, then the group's keys.
  ARGV[1] state   ARGV[2] first edge (Redis ms)   ARGV[3] bucket width (ms)   ARGV[4] buckets (<= 1024)
  ARGV[5] '1' = also count below HELD_BASE and the whole set (the last call of a horizon)
  Returns {C(first edge), C(first edge + width), ..., C(first edge + buckets * width)} where C(t)
  is the number of members scored below t, then, with ARGV[5], C(HELD_BASE) and the set's size
  (held messages score from HELD_BASE up).
]]
local key = G[ARGV[1]]
local first, width = tonumber(ARGV[2]), tonumber(ARGV[3])
local buckets = math.min(tonumber(ARGV[4]), 1024)
local below = {}
for i = 0, buckets do
  -- '%.0f': Lua's tostring writes 14 significant digits; an edge needs every one.
  below[i + 1] = redis.call('ZCOUNT', key, '-inf', string.format('(%.0f', first + i * width))
end
if ARGV[5] == '1' then
  below[#below + 1] = redis.call('ZCOUNT', key, '-inf', string.format('(%.0f', HELD_BASE))
  below[#below + 1] = redis.call('ZCARD', key)
end
return below
