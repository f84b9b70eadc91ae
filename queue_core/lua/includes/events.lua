--@include
--[[
  events: buffered per (kind, group) and written once per script call (ev_flush): one stream
  entry per (kind, group); per-message columns are comma lists aligned with `ids` (see
  queue_core/events.py, which explodes them back into one row per message).
]]

local EVB, EVB_ORDER = {}, {}

-- The buffer of one (kind, group) in this call, created on first use.
local function ev_buffer(kind, group)
  local key = kind .. '\0' .. group
  local b = EVB[key]
  if not b then
    b = {kind = kind, group = group, ids = {}, cols = {}}
    EVB[key] = b
    EVB_ORDER[#EVB_ORDER + 1] = key
  end
  return b
end

local function ev_add(kind, group, id, cols)
  local b = ev_buffer(kind, group)
  local n = #b.ids + 1
  b.ids[n] = id
  if cols then
    for name, v in pairs(cols) do
      local c = b.cols[name]
      if not c then c = {}; b.cols[name] = c end
      c[n] = v
    end
  end
end

-- A whole list of ids, with their columns as whole lists (the hot paths build them as they go).
local function ev_ids(kind, group, ids, cols)
  local b = ev_buffer(kind, group)
  local base = #b.ids
  if base == 0 then   -- a new buffer adopts the caller's arrays instead of copying them
    b.ids = ids
    if cols then for name, values in pairs(cols) do b.cols[name] = values end end
    return
  end
  for i, id in ipairs(ids) do b.ids[base + i] = id end
  if cols then
    for name, values in pairs(cols) do
      local c = b.cols[name]
      if not c then c = {}; b.cols[name] = c end
      for i, v in ipairs(values) do c[base + i] = v end
    end
  end
end

local function ev_flush(tcfg, ts, actor, extra)
  if tcfg.events ~= '1' then return end
  for _, key in ipairs(EVB_ORDER) do
    local b = EVB[key]
    local f = {'e', b.kind, 'g', b.group, 'ts', ts, 'n', #b.ids, 'ids', table.concat(b.ids, ','), 'actor', actor or ''}
    for name, c in pairs(b.cols) do
      for i = 1, #b.ids do if c[i] == nil then c[i] = '' end end
      f[#f + 1] = name; f[#f + 1] = table.concat(c, ',')
    end
    if extra then for k, v in pairs(extra) do f[#f + 1] = k; f[#f + 1] = v end end
    redis.call('XADD', P.events, 'MAXLEN', '~', tcfg.events_maxlen, '*', unpack(f))
  end
end
