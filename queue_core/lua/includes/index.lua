--@include
--[[
  Indexed fields (issue 36; what a message's entries are: queue_core/indexes.py). P.ix lists every
  entry of every message as "<slot>\0<text>\0<id>" (score 0, so an equality query is one lex
  range), P.ixv keeps each message's entries ("<slot>\0<text>" pairs joined by NUL: no text holds
  one) so they leave with it. Calls are chunked: a message may have many entries (each element of
  a list), and Lua's unpack takes a few thousand values at most.
]]

local INDEX_CHUNK = 1000

local function chunked(command, key, args)
  for i = 1, #args, INDEX_CHUNK do
    redis.call(command, key, unpack(args, i, math.min(#args, i + INDEX_CHUNK - 1)))
  end
end

-- The members of P.ix for message `id` whose entries are `e`.
local function index_members(id, e)
  local out, pos = {}, 1
  while pos <= #e do
    local a = string.find(e, '\0', pos, true)
    if not a then break end
    local b = string.find(e, '\0', a + 1, true) or (#e + 1)
    out[#out + 1] = string.sub(e, pos, b - 1) .. '\0' .. id
    pos = b + 1
  end
  return out
end

-- List `ids` (their entries `es`, in the same order; '' = none) in the index.
local function index_add(ids, es)
  local z, h = {}, {}
  for j, id in ipairs(ids) do
    local e = es[j]
    if e and e ~= '' then
      for _, m in ipairs(index_members(id, e)) do z[#z + 1] = 0; z[#z + 1] = m end
      h[#h + 1] = id; h[#h + 1] = e
    end
  end
  if #z > 0 then
    chunked('ZADD', P.ix, z)
    chunked('HSET', P.ixv, h)
  end
end

-- Take `ids` out of the index (those listed; the others cost one HMGET field).
local function index_remove(ids)
  local es = redis.call('HMGET', P.ixv, unpack(ids))
  local z, gone = {}, {}
  for j, id in ipairs(ids) do
    if es[j] then
      for _, m in ipairs(index_members(id, es[j])) do z[#z + 1] = m end
      gone[#gone + 1] = id
    end
  end
  if #z > 0 then chunked('ZREM', P.ix, z) end
  if #gone > 0 then redis.call('HDEL', P.ixv, unpack(gone)) end
end

-- The entries of a call's messages as the client sends them: "<length>:<entries>" per message,
-- in the call's order (length 0: none). Returns the list of entries strings.
local function index_entries_of(blob, n)
  local out, pos = {}, 1
  for j = 1, n do
    local colon = string.find(blob, ':', pos, true)
    if not colon then out[j] = ''
    else
      local len = tonumber(string.sub(blob, pos, colon - 1)) or 0
      out[j] = string.sub(blob, colon + 1, colon + len)
      pos = colon + len + 1
    end
  end
  return out
end

-- A debounce gave message `id` a new payload and kept its headers: its payload fields' entries
-- become those of `e` (computed by the client for the new payload), its header fields' stay.
local function index_debounced(id, e, declaration)
  if declaration == nil or declaration == '' then return end
  local header_slot = {}
  for _, pair in ipairs(cjson.decode(declaration)) do
    if string.sub(pair[2], 1, 7) == 'header.' then header_slot[tostring(pair[1])] = true end
  end
  local keep = {}
  local function take(entries, headers)
    local pos = 1
    while pos <= #entries do
      local a = string.find(entries, '\0', pos, true)
      if not a then break end
      local b = string.find(entries, '\0', a + 1, true) or (#entries + 1)
      if (header_slot[string.sub(entries, pos, a - 1)] or false) == headers then
        keep[#keep + 1] = string.sub(entries, pos, b - 1)
      end
      pos = b + 1
    end
  end
  take(redis.call('HGET', P.ixv, id) or '', true)
  take(e or '', false)
  index_remove({id})
  index_add({id}, {table.concat(keep, '\0')})
end
