-- A message's state is never stored: it is the ZSET that holds the id.

local function state_of(gk, id)
  for _, s in ipairs(STATES) do
    local score = redis.call('ZSCORE', gk[s], id)
    if score then return s, tonumber(score) end
  end
  return nil, nil
end
