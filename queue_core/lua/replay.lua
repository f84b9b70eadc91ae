--@include common
--[[
  replay: dead -> ready (or pending with a delay) for the given ids, attempts reset, replay count
  + 1. Compare-and-set: an id that is no longer dead (replayed or deleted by someone else) is
  skipped, so a double click or two operators never replay a message twice. Backs DelayQueue.replay().

  KEYS: the topic's keys in TopicKeys order (keys.py).
  ARGV[1] delay ms (0 = ready now)   ARGV[2] actor   ARGV[3..] ids

  Returns one code per id: 0 replayed, -5 skipped (not dead, or corrupt and not replayable).
]]
local cfg = load_config()
local ts = now_ms()
local delay, actor = tonumber(ARGV[1]), ARGV[2]
local out = {}
local moved = 0
for i = 3, #ARGV do
  if replay_one(cfg, ARGV[i], ts, delay, actor) then out[#out + 1] = 0; moved = moved + 1 else out[#out + 1] = -5 end
end
if moved > 0 and delay == 0 then signal_workers(moved) end
return out
