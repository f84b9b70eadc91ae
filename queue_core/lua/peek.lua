--@include base
--[[
  peek: one page of a state of one group, ordered by score (due time, lease deadline or time of
  death), ties by id. Read only; O(log n + limit) at any depth. Backs DelayQueue.peek() and page().

  KEYS: the partition's keys, then the group's keys.
  ARGV[1] state   ARGV[2] offset   ARGV[3] limit (<= 1000)
  ARGV[4] cursor score ('' = page by offset)   ARGV[5] cursor id: the page starts after (score, id)
  Returns a flat list of 7-tuples: id, score, record or '', info or '', attempts or '', lease or '',
  traceback or ''.
]]
local key = G[ARGV[1]]
local limit = math.min(tonumber(ARGV[3]), 1000)
local rows
if ARGV[4] ~= '' then
  -- The page starts after (score, id). When the cursor's message is here with that score, its
  -- rank says where; otherwise (it moved on, or it lives in another partition) the position is
  -- found by binary search among the members sharing the score: O(log^2 n), never a scan.
  local after_score, after_id = tonumber(ARGV[4]), ARGV[5]
  local rank = redis.call('ZRANK', key, after_id)
  local pos
  if rank and tonumber(redis.call('ZSCORE', key, after_id)) == after_score then
    pos = rank + 1
  else
    local lo = redis.call('ZCOUNT', key, '-inf', '(' .. ARGV[4])
    local hi = lo + redis.call('ZCOUNT', key, ARGV[4], ARGV[4])
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if redis.call('ZRANGE', key, mid, mid)[1] <= after_id then lo = mid + 1 else hi = mid end
    end
    pos = lo
  end
  rows = redis.call('ZRANGE', key, pos, pos + limit - 1, 'WITHSCORES')
else
  local offset = tonumber(ARGV[2])
  rows = redis.call('ZRANGE', key, offset, offset + limit - 1, 'WITHSCORES')
end
local out = {}
for i = 1, #rows, 2 do
  local id = rows[i]
  out[#out + 1] = id; out[#out + 1] = rows[i + 1]
  out[#out + 1] = redis.call('HGET', P.msgs, id) or ''
  out[#out + 1] = redis.call('HGET', G.info, id) or ''
  out[#out + 1] = redis.call('HGET', G.att, id) or ''
  out[#out + 1] = redis.call('HGET', G.leases, id) or ''
  out[#out + 1] = redis.call('HGET', G.tracebacks, id) or ''
end
return out
