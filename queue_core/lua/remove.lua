--@include base, batch, config, dead, events, hold, info, removal, signal, state
--[[
  remove: delete messages from one group if they are in one of the expected states
  (compare-and-set on the state the caller saw). Backs DelayQueue.cancel() ('cancelled') and
  DelayQueue.delete() ('deleted'). The payload goes when the last group is done with it.

  KEYS: the partition's keys, then the group's keys, then (undo) the operation's holding area.
  ARGV[1] event name ('cancelled' | 'deleted')
  ARGV[2] expected states, comma separated (e.g. 'pending,ready,retrying')
  ARGV[3] actor   ARGV[4] group
  ARGV[5..] ids

  Returns one code per id: CODE.OK removed, CODE.NOT_FOUND, CODE.STATE_CONFLICT (in a state not
  expected).
]]
local tcfg = load_topic()
local gcfg = load_group()
local ts = now_ms()
hold_open()   -- undo: the holding area passed after the group's keys, if any (includes/hold.lua)
local event, actor, group = ARGV[1], ARGV[3], ARGV[4]
local expected = {}
for s in string.gmatch(ARGV[2], '[^,]+') do expected[s] = true end
local out = {}
local removed = 0
for i = 5, #ARGV do
  local id = ARGV[i]
  local state, score = state_of(G, id)
  if not state then
    out[#out + 1] = CODE.NOT_FOUND
  elseif not expected[state] then
    out[#out + 1] = CODE.STATE_CONFLICT
  else
    local att = attempts_of(G, id)
    hold_take(G, id, state, ts)
    local info = remove_from(G, gcfg, id, state, score, ts, group)
    ev_add(event, group, id, {att = att, from = state, fp = fp_of(info)})
    removed = removed + 1
    out[#out + 1] = CODE.OK
  end
end
if removed > 0 then redis.call('HINCRBY', G.stats, event, removed) end
if removed > 0 and gcfg.ordered == '1' then signal_workers(G, 1) end
hold_save()
ev_flush(tcfg, ts, actor)
return batch_mark(out)   -- 'batch' last when a callback fired (includes/batch.lua)
