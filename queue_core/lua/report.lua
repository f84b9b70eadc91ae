--@include base, cancels, journal, lease
--[[
  report: a worker sends what its handlers reported (message.progress(), message.log()) for
  deliveries it holds. Backs DelayQueue.report(); the worker's keeper calls it at most every 0.5 s
  with what was buffered, and before a nack. Fenced like extend: only the lease holder writes.

  KEYS: the partition's keys, then the group's keys.
  ARGV[1] lines kept per message   ARGV[2] bytes kept per message
  ARGV[3..] per delivery, 4 fields: id, token, progress ('' = none), new log lines ('' = none)

  Returns one code per delivery: CODE.OK written, CODE.LEASE_LOST (nothing written), or
  CODE.CANCELLED (the lease was cancelled: the handler must stop; includes/cancels.lua).
]]
local max_lines, max_bytes = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {}
for i = 3, #ARGV, 4 do
  local id, token, progress, lines = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  if held_lease(G, id, token) then
    if progress ~= '' then redis.call('HSET', G.journal, id .. '|p', progress) end
    if lines ~= '' then
      redis.call('HSET', G.journal, id, append_log(redis.call('HGET', G.journal, id), lines, max_lines, max_bytes))
    end
    out[#out + 1] = CODE.OK
  else
    out[#out + 1] = lost_code(G, id, token)
  end
end
return out
