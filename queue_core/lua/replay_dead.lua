--@include base, config, events, replay_one, signal
--[[
  replay_dead: one bounded batch of a whole-DLQ (or one error group) replay in one group. Backs
  DelayQueue.replay_dead(), which calls it until it returns fewer than the batch.

  Only messages that died at or before ARGV[2] are taken, so a replay of a group whose messages
  keep failing again cannot loop forever.

  KEYS: the partition's keys, then the group's keys.
  ARGV[1] fingerprint ('' = every dead letter)
  ARGV[2] cutoff ms (death time upper bound)
  ARGV[3] batch size
  ARGV[4] delay ms (0 = ready now)
  ARGV[5] actor
  ARGV[6] since ms (death time lower bound, 0 = from the oldest)
  ARGV[7] group

  Returns {examined, replayed} or {examined, replayed, corrupt_id}.
]]
local tcfg = load_topic()
local gcfg = load_group()
local ts = now_ms()
local fp, cutoff, batch, delay, actor = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local since, group = tonumber(ARGV[6] or '0'), ARGV[7]
local ids = {}
if fp == '' then
  ids = redis.call('ZRANGEBYSCORE', G.dead, since, cutoff, 'LIMIT', 0, batch)
else
  local members = redis.call('ZRANGEBYLEX', G.fp_index, '[' .. fp .. ':' .. string.format('%015d', since),
    '[' .. fp .. ':' .. string.format('%015d', cutoff) .. ';', 'LIMIT', 0, batch)
  for _, m in ipairs(members) do ids[#ids + 1] = string.sub(m, #fp + 18) end
end
local moved = 0
local result = nil
for _, id in ipairs(ids) do
  if replay_one(tcfg, G, gcfg, group, id, ts, delay, actor) then
    moved = moved + 1
  elseif redis.call('ZSCORE', G.dead, id) then
    -- Corrupt dead letters cannot be replayed; they would be examined again by every batch,
    -- so report them and stop here rather than loop.
    result = {#ids, moved, id}
    break
  end
end
if moved > 0 and delay == 0 then signal_workers(G, moved) end
ev_flush(tcfg, ts, actor)
return result or {#ids, moved}
