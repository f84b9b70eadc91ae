--@include base, config, dispatch, events, info, signal, state
--[[
  deliver_now: pending|retrying -> ready at once, for a batch of ids. Backs DelayQueue.deliver_now().
  A message held behind its ordering key stays held (state conflict).

  KEYS: the partition's keys, then the group's keys.
  ARGV[1] actor   ARGV[2] group   ARGV[3..] ids

  Returns one code per id: CODE.OK moved, CODE.NOT_FOUND, CODE.STATE_CONFLICT (not pending or
  retrying).
]]
local tcfg = load_topic()
local ts = now_ms()
local actor, group = ARGV[1], ARGV[2]
local out = {}
local moved = 0
for i = 3, #ARGV do
  local id = ARGV[i]
  local state, score = state_of(G, id)
  if not state then
    out[#out + 1] = CODE.NOT_FOUND
  elseif (state ~= 'pending' and state ~= 'retrying') or score >= HELD_BASE then
    out[#out + 1] = CODE.STATE_CONFLICT
  else
    local info = load_info(G, id)
    redis.call('ZREM', G[state], id)
    to_ready(G, {id}, {ts})
    if info then
      push_history(tcfg, info, ts, 'delivered_now', attempts_of(G, id), actor, 'from ' .. state)
      save_info(G, id, info)
    end
    ev_add('delivered_now', group, id, {att = attempts_of(G, id), due = ts, from = state})
    moved = moved + 1
    out[#out + 1] = CODE.OK
  end
end
if moved > 0 then signal_workers(G, moved) end
ev_flush(tcfg, ts, actor)
return out
