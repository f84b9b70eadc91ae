--@include base, batch, config, dead, events, hold, info, record, retention, state
--[[
  kill: a retrying message becomes a dead letter now, with its last error (so it joins that
  error's group in the dead-letter queue), instead of waiting for its remaining attempts. Backs
  DelayQueue.kill(). Compare-and-set: only messages still retrying move.

  KEYS: the partition's keys, then the group's keys, then (undo) the operation's holding area.
  ARGV[1] actor   ARGV[2] group   ARGV[3] corrupt_fp (for a message whose record is unreadable)
  ARGV[4..] ids

  Returns one code per id: CODE.OK moved, CODE.NOT_FOUND, CODE.STATE_CONFLICT (not retrying).
]]
local tcfg = load_topic()
local gcfg = load_group()
local ts = now_ms()
hold_open()   -- undo: the holding area passed after the group's keys, if any (includes/hold.lua)
local actor, group = ARGV[1], ARGV[2]
local out = {}
local moved = 0
for i = 4, #ARGV do
  local id = ARGV[i]
  local state = state_of(G, id)
  if not state then
    out[#out + 1] = CODE.NOT_FOUND
  elseif state ~= 'retrying' then
    out[#out + 1] = CODE.STATE_CONFLICT
  else
    hold_take(G, id, 'retrying', ts, true)
    redis.call('ZREM', G.retrying, id)
    local att = attempts_of(G, id)
    local info, reason = load_info(G, id)
    if not info then
      quarantine(tcfg, G, gcfg, group, id, ts, reason or 'delivery record missing', ARGV[3],
        redis.call('HGET', G.info, id))
    else
      push_history(tcfg, info, ts, 'killed', att, actor, 'dead now instead of retrying')
      to_dead(tcfg, G, gcfg, group, id, info, att, ts, okey_of(id))
      save_info(G, id, info)
    end
    moved = moved + 1
    out[#out + 1] = CODE.OK
  end
end
if moved > 0 then enforce_retention(tcfg, G, gcfg, group, ts, 100) end
hold_save()
ev_flush(tcfg, ts, actor)
return batch_mark(out)   -- 'batch' last when a callback fired (includes/batch.lua)
