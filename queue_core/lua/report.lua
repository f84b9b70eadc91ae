--@include base, cancels, journal, lease
--[[
  report: a worker sends what its handlers reported (message.progress(), message.log()) for
  deliveries it holds. Backs DelayQueue.report(); the worker's keeper calls it at most every 0.5 s
  with what was buffered, and before a nack. Fenced like extend: only the lease holder writes.
  The caller keeps a call to at most a few hundred lines (DelayQueue.report splits bigger ones).

  KEYS: the partition's keys, then the group's keys.
  ARGV[1] lines kept per message   ARGV[2] bytes kept per message
  ARGV[3..] per delivery: id, token, progress ('' = none), n, then n new log lines

  Returns one code per delivery: CODE.OK written, CODE.LEASE_LOST (nothing written), or
  CODE.CANCELLED (the lease was cancelled: the handler must stop; includes/cancels.lua).
]]
local max_lines, max_bytes = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {}
local i = 3
while i <= #ARGV do
  local id, token, progress, n = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
  if held_lease(G, id, token) then
    if progress ~= '' then redis.call('HSET', G.journal, id .. '|p', progress) end
    if n > 0 then append_lines(G, id, {unpack(ARGV, i + 4, i + 3 + n)}, max_lines, max_bytes) end
    out[#out + 1] = CODE.OK
  else
    out[#out + 1] = lost_code(G, id, token)
  end
  i = i + 4 + n
end
return out
