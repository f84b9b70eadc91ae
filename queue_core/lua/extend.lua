--@include base, cancels, lease
--[[
  extend: push the lease deadline of unacked deliveries to Redis now + ARGV[1] ms. Backs
  DelayQueue.extend() and the worker's automatic lease keeper.

  KEYS: the partition's keys, then the group's keys.
  ARGV[1] lease ms from now
  ARGV[2..] pairs: id, token

  Returns {now_ms, then one entry per pair: new deadline ms, or CODE.LEASE_LOST, or CODE.CANCELLED
  when an operator cancelled that lease (includes/cancels.lua: the worker stops the handler)}.
]]
local ts = now_ms()
local dl = ts + tonumber(ARGV[1])
local out = {ts}
for i = 2, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  if held_lease(G, id, token) then
    redis.call('ZADD', G.unacked, 'XX', dl, id)
    out[#out + 1] = dl
  else
    out[#out + 1] = lost_code(G, id, token)
  end
end
return out
