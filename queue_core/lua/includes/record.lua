--@include
--[[
  record: P.msgs[id] = "created|max|ttl|keylen|okeylen|hdrlen|" .. key .. okey .. headers_json
  .. payload: header and payload in one value, written once at publish (one hash operation per
  step instead of two); the header is parsed only off the hot path.
]]

-- A record's header as a table {c, max, ttl, key, okey, hdr, body} (body: where the payload
-- starts), or nil when it is not one of ours.
local function parse_header(h)
  if not h then return nil end
  local c, max, ttl, kl, okl, hl, rest = string.match(h, '^(%d+)|(%d*)|(%d*)|(%d+)|(%d+)|(%d+)|()')
  if not c then return nil end
  kl, okl, hl = tonumber(kl), tonumber(okl), tonumber(hl)
  return {c = tonumber(c), max = tonumber(max), ttl = tonumber(ttl), key = string.sub(h, rest, rest + kl - 1),
    okey = string.sub(h, rest + kl, rest + kl + okl - 1), hdr = string.sub(h, rest + kl + okl, rest + kl + okl + hl - 1),
    body = rest + kl + okl + hl}
end

-- The header part of a record for fields c, max, ttl, key, okey, hdr (a new record is this plus a
-- payload).
local function header_string(c, max, ttl, key, okey, hdr)
  return c .. '|' .. (max or '') .. '|' .. (ttl or '') .. '|' .. #key .. '|' .. #okey .. '|' .. #hdr .. '|' .. key
    .. okey .. hdr
end

local function okey_of(id)
  local h = parse_header(redis.call('HGET', P.msgs, id))
  return h and h.okey or ''
end
