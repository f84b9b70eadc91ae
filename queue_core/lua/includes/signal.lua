-- Wake-up tokens for a group's sleeping workers (a bounded list: keys.py GroupKeys.signal).
local SIGNAL_MAX = 64

local function signal_workers(gk, n)
  for _ = 1, math.min(n, 16) do redis.call('RPUSH', gk.signal, '1') end
  redis.call('LTRIM', gk.signal, -SIGNAL_MAX, -1)
end
