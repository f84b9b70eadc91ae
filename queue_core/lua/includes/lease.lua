--[[
  lease: G.leases[id] = "token|attempt|claim ms|due ms|ordering key" while unacked, followed by
  "\1cause" when the delivery was late (lateness.lua; no ordering key has a control character):
  ack checks the token there without reading anything else (the hot path).
]]

-- A lease string as a table, or nil.
local function parse_lease(raw)
  if not raw then return nil end
  local tok, att, ct, due, okey = string.match(raw, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^\1]*)')
  if not tok then return nil end
  return {tok = tok, att = tonumber(att), ct = tonumber(ct), due = tonumber(due), okey = okey}
end

-- The lease of an unacked message if `token` holds it, else nil.
local function held_lease(gk, id, token)
  local lease = parse_lease(redis.call('HGET', gk.leases, id))
  if not lease or lease.tok ~= token then return nil end
  return lease
end
