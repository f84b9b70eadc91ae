--@include common
--[[
  deliver_now: pending|retrying -> ready at once. Backs DelayQueue.deliver_now().

  KEYS: the topic's keys in TopicKeys order (keys.py).
  ARGV[1] actor   ARGV[2..] ids

  Returns one code per id: 0 moved, -4 not found, -5 not pending or retrying (state conflict).
]]
local cfg = load_config()
local ts = now_ms()
local actor = ARGV[1]
local out = {}
for i = 2, #ARGV do
  local id = ARGV[i]
  local state = state_of(id)
  local meta = load_meta(id)
  if not state then
    out[#out + 1] = -4
  elseif (state ~= 'pending' and state ~= 'retrying') or not meta then
    out[#out + 1] = -5
  else
    redis.call('ZREM', K[state], id)
    redis.call('ZADD', K.ready, ts, id)
    meta.due = ts
    push_history(cfg, meta, ts, 'delivered_now', actor, 'from ' .. state)
    save_meta(id, meta)
    emit(cfg, {'event', 'delivered_now', 'msg', id, 'ts', ts, 'attempt', meta.att, 'due', ts, 'actor', actor})
    out[#out + 1] = 0
  end
end
if #out > 0 then signal_workers(1) end
return out
