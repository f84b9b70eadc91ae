--@include
--[[
  cancels: a lease taken by cancel(..., running=True) leaves the mark "<id>|<token>" in G.cancels,
  scored with the time until which its holder may still ask (the lease's deadline plus
  CANCEL_MARK_MS). The holder's next lease extension (extend.lua, report.lua) then answers
  CODE.CANCELLED instead of CODE.LEASE_LOST, so the worker stops the handler at once instead of
  working on until its ack is refused. A mark is read once; marks nobody read (the worker died)
  are trimmed by later cancels, at most 100 per call, so the set stays bounded.
]]
local CANCEL_MARK_MS = 60000

local function mark_cancelled(gk, id, token, deadline, ts)
  local old = redis.call('ZRANGEBYSCORE', gk.cancels, '-inf', ts, 'LIMIT', 0, 100)
  if #old > 0 then redis.call('ZREM', gk.cancels, unpack(old)) end
  redis.call('ZADD', gk.cancels, math.max(deadline or ts, ts) + CANCEL_MARK_MS, id .. '|' .. token)
end

-- Why `token` no longer holds `id`: CODE.CANCELLED (once) when an operator cancelled that very
-- lease, else CODE.LEASE_LOST. Only called on a refusal: the held-lease path never reads the set.
local function lost_code(gk, id, token)
  local mark = id .. '|' .. token
  if redis.call('ZREM', gk.cancels, mark) == 1 then return CODE.CANCELLED end
  return CODE.LEASE_LOST
end
