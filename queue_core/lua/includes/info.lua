--[[
  Per-delivery records of a group:
    att    G.att[id] = attempts made, written when an attempt fails (absent: none failed yet)
    info   G.info[id] = JSON {rc, da, err = {t, m, fp}, h = list of {ts, event, att, summary, actor},
           corrupt}, written only by failures and operator actions: claim and ack never encode or
           decode JSON
]]

-- Decodes a group's info record; returns info or nil, reason. Corrupt data must never raise inside
-- a script that also moves other messages: that would abort the batch and block every worker.
local function load_info(gk, id)
  local raw = redis.call('HGET', gk.info, id)
  if not raw then return {rc = 0, h = {}}, nil end
  local ok, info = pcall(cjson.decode, raw)
  if not ok or type(info) ~= 'table' or type(info.h) ~= 'table' then
    return nil, 'delivery record is not valid delayq JSON: ' .. string.sub(raw, 1, 200)
  end
  return info, nil
end

local function save_info(gk, id, info)
  redis.call('HSET', gk.info, id, cjson.encode(info))
end

local function push_history(tcfg, info, ts, event, att, actor, summary)
  local h = info.h
  h[#h + 1] = {ts, event, att, summary or '', actor or ''}
  while #h > tcfg.history_max do table.remove(h, 1) end
end

local function attempts_of(gk, id)
  return tonumber(redis.call('HGET', gk.att, id)) or 0
end
