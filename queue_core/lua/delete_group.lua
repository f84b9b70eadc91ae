--@include base, config, events, leave
--[[
  delete_group: one bounded batch of removing a group's messages from one partition (each one
  released like an ack, so payloads no other group holds are freed). Backs DelayQueue.delete_group(),
  which calls it until it returns 0, then deletes the group's (then empty) keys.

  KEYS: the partition's keys, then the group's keys.
  ARGV[1] batch size   ARGV[2] actor   ARGV[3] group

  Returns the number of messages removed in this batch.
]]
local tcfg = load_topic()
local gcfg = load_group()
gcfg.ordered = '0'   -- no key passes on: the whole group goes
local ts = now_ms()
local batch, actor, group = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local n = 0
-- Chains end with the group: its waiting children go with it (they are in its states), so the
-- links are dropped first rather than dead-lettering each child of each parent it deletes.
redis.call('UNLINK', G.chain_parent, G.chain_children, G.chain_acked)
for _, s in ipairs(STATES) do
  if n >= batch then break end
  local ids = redis.call('ZRANGE', G[s], 0, batch - n - 1)
  if #ids > 0 then
    redis.call('ZREM', G[s], unpack(ids))
    leave(G, gcfg, ids, nil, ts)
    for _, id in ipairs(ids) do ev_add('deleted', group, id, {from = s}) end
    n = n + #ids
  end
end
ev_flush(tcfg, ts, actor)
return n
