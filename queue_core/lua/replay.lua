--@include base, config, events, replay_one, signal
--[[
  replay: dead -> ready (or pending with a delay) for the given ids of one group, attempts reset,
  replay count + 1. Compare-and-set: an id that is no longer dead (replayed or deleted by someone
  else) is skipped, so a double click or two operators never replay a message twice. Backs
  DelayQueue.replay().

  KEYS: the partition's keys, then the group's keys.
  ARGV[1] delay ms (0 = ready now)   ARGV[2] actor   ARGV[3] group   ARGV[4..] ids

  Returns one code per id: CODE.OK replayed, CODE.STATE_CONFLICT skipped (not dead, or corrupt
  and not replayable).
]]
local tcfg = load_topic()
local gcfg = load_group()
local ts = now_ms()
local delay, actor, group = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local out = {}
local moved = 0
for i = 4, #ARGV do
  if replay_one(tcfg, G, gcfg, group, ARGV[i], ts, delay, actor) then
    out[#out + 1] = CODE.OK; moved = moved + 1
  else
    out[#out + 1] = CODE.STATE_CONFLICT
  end
end
if moved > 0 and delay == 0 then signal_workers(G, moved) end
ev_flush(tcfg, ts, actor)
return out
