--@include base, config, dispatch, events, lease, signal
--[[
  release: unacked -> ready for deliveries a worker claimed but never started (it is stopping),
  without counting an attempt: the message keeps its due time and goes back to the front.
  Backs DelayQueue.release(), called by Worker on shutdown.

  KEYS: the partition's keys, then the group's keys.
  ARGV[1] actor   ARGV[2] group   ARGV[3..] pairs: id, token

  Returns one code per pair: CODE.OK released, CODE.LEASE_LOST.
]]
local tcfg = load_topic()
local ts = now_ms()
local actor, group = ARGV[1], ARGV[2]
local out = {}
local released = 0
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  local lease = held_lease(G, id, ARGV[i + 1])
  if lease then
    redis.call('ZREM', G.unacked, id)
    redis.call('HDEL', G.leases, id)
    to_ready(G, {id}, {lease.due or ts})
    ev_add('released', group, id, {att = lease.att - 1})
    released = released + 1
    out[#out + 1] = CODE.OK
  else
    out[#out + 1] = CODE.LEASE_LOST
  end
end
if released > 0 then
  redis.call('HINCRBY', G.stats, 'released', released)
  signal_workers(G, released)
end
ev_flush(tcfg, ts, actor)
return out
