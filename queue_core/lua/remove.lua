--@include common
--[[
  remove: delete messages that are in one of the expected states (compare-and-set on the state
  the caller saw). Backs DelayQueue.cancel() ('cancelled') and DelayQueue.delete() ('deleted').

  KEYS: the topic's keys in TopicKeys order (keys.py).
  ARGV[1] event name ('cancelled' | 'deleted')
  ARGV[2] expected states, comma separated (e.g. 'pending,ready,retrying')
  ARGV[3] actor
  ARGV[4..] ids

  Returns one code per id: 0 removed, -4 not found, -5 in a state not expected.
]]
local cfg = load_config()
local ts = now_ms()
local event, actor = ARGV[1], ARGV[3]
local expected = {}
for s in string.gmatch(ARGV[2], '[^,]+') do expected[s] = true end
local out = {}
local removed = 0
for i = 4, #ARGV do
  local id = ARGV[i]
  local state = state_of(id)
  if not state then
    out[#out + 1] = -4
  elseif not expected[state] then
    out[#out + 1] = -5
  else
    local meta = load_meta(id)
    if state == 'dead' then unindex_dead(id, meta) else redis.call('ZREM', K[state], id) end
    delete_data(id, meta and meta.key)
    emit(cfg, {'event', event, 'msg', id, 'ts', ts, 'attempt', meta and meta.att or 0, 'from', state,
      'fp', meta and fp_of(meta) or 'none', 'actor', actor})
    removed = removed + 1
    out[#out + 1] = 0
  end
end
if removed > 0 then redis.call('HINCRBY', K.stats, event, removed) end
return out
