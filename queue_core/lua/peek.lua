--@include common
--[[
  peek: one page of a state, ordered by score (due time, lease deadline or time of death), ties
  by id. Read only; O(log n + limit) at any depth. Backs DelayQueue.peek() and page().

  KEYS: the topic's keys in TopicKeys order (keys.py).
  ARGV[1] state   ARGV[2] offset   ARGV[3] limit (<= 1000)
  ARGV[4] cursor score ('' = page by offset)   ARGV[5] cursor id: the page starts after (score, id)
  Returns a flat list of 5-tuples: id, score, meta_json or '', payload or false, traceback or ''.
]]
local key = K[ARGV[1]]
local limit = math.min(tonumber(ARGV[3]), 1000)
local rows
if ARGV[4] ~= '' then
  local after_score, after_id = tonumber(ARGV[4]), ARGV[5]
  local rank = redis.call('ZRANK', key, after_id)
  if rank then
    rows = redis.call('ZRANGE', key, rank + 1, rank + limit, 'WITHSCORES')
  else
    -- The cursor's message has moved on since the page was drawn: start at its score and skip
    -- members of that score that sort at or before its id.
    local start = redis.call('ZCOUNT', key, '-inf', '(' .. ARGV[4])
    local raw = redis.call('ZRANGE', key, start, start + 2 * limit - 1, 'WITHSCORES')
    rows = {}
    for i = 1, #raw, 2 do
      if not (tonumber(raw[i + 1]) == after_score and raw[i] <= after_id) and #rows < 2 * limit then
        rows[#rows + 1] = raw[i]; rows[#rows + 1] = raw[i + 1]
      end
    end
  end
else
  local offset = tonumber(ARGV[2])
  rows = redis.call('ZRANGE', key, offset, offset + limit - 1, 'WITHSCORES')
end
local out = {}
for i = 1, #rows, 2 do
  local id = rows[i]
  out[#out + 1] = id; out[#out + 1] = rows[i + 1]
  out[#out + 1] = redis.call('HGET', K.meta, id) or ''
  out[#out + 1] = redis.call('HGET', K.payloads, id) or false
  out[#out + 1] = redis.call('HGET', K.tracebacks, id) or ''
end
return out
