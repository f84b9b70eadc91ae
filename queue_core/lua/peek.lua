--@include base, cursor, rows
--[[
  peek: one page of a state of one group, ordered by score (due time, lease deadline or time of
  death), ties by id; oldest first, or newest first when reversed. Read only; O(log n + limit) at
  any depth. Backs DelayQueue.peek() and page().

  KEYS: the partition's keys, then the group's keys.
  ARGV[1] state   ARGV[2] offset   ARGV[3] limit (<= 1000)
  ARGV[4] cursor score ('' = page by offset)   ARGV[5] cursor id: the page starts after (score, id)
  in the page's order, so a reversed page starts at the first member below (score, id)
  ARGV[6] '1' = reversed: (score, id) descending, the offset counted from the highest ('' or
  absent = ascending)
  Returns a flat list of 9-tuples: id, score, record or '', info or '', attempts or '', lease or '',
  traceback or '', "<priority>|<fairness key>" or '' (a ready score is the due time less the
  priority's head start: includes/dispatch.lua), the id holding a held row's ordering key or ''
  (includes/rows.lua).
]]
local key = G[ARGV[1]]
local limit = math.min(tonumber(ARGV[3]), 1000)
local reversed = ARGV[6] == '1'
local rows
if ARGV[4] ~= '' then
  -- The cursor splits the set at (score, id) (includes/cursor.lua).
  local first, below = split_at(key, ARGV[4], ARGV[5])
  if reversed then
    if below <= 0 then
      rows = {}
    else
      -- Ranks [below - limit, below - 1] read ascending, then turned (pairs kept together).
      local asc = redis.call('ZRANGE', key, math.max(0, below - limit), below - 1, 'WITHSCORES')
      rows = {}
      for i = #asc - 1, 1, -2 do
        rows[#rows + 1] = asc[i]; rows[#rows + 1] = asc[i + 1]
      end
    end
  else
    rows = redis.call('ZRANGE', key, first, first + limit - 1, 'WITHSCORES')
  end
else
  local offset = tonumber(ARGV[2])
  rows = redis.call(reversed and 'ZREVRANGE' or 'ZRANGE', key, offset, offset + limit - 1, 'WITHSCORES')
end
local out = {}
for i = 1, #rows, 2 do append_row(out, rows[i], rows[i + 1]) end
return out
