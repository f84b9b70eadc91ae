--@include
--[[
  journal: what handlers reported while they ran (queue_core/journal.py), in G.journal:
  "<id>" -> log lines "<ms>|<attempt>|<text>" joined by '\n', the oldest dropped past a line and a
  byte cap; "<id>|p" -> the latest progress "<fraction>|<ms>|<attempt>|<note>". Written by
  report.lua only; deleted with the message's other per-delivery records (leave.lua).
]]

-- `log` with `lines` appended, keeping the newest `max_lines` lines and `max_bytes` bytes.
local function append_log(log, lines, max_lines, max_bytes)
  local text = lines
  if log and log ~= '' then text = log .. '\n' .. lines end
  if #text > max_bytes then
    local cut = string.find(text, '\n', #text - max_bytes + 1, true)
    text = cut and string.sub(text, cut + 1) or ''
  end
  local _, breaks = string.gsub(text, '\n', '')
  local drop = breaks + 1 - max_lines
  local pos = 0
  while drop > 0 do
    pos = string.find(text, '\n', pos + 1, true)
    drop = drop - 1
  end
  if pos > 0 then text = string.sub(text, pos + 1) end
  return text
end

-- The journal fields of `ids` (both per id), for HDEL.
local function journal_fields(ids)
  local out = {}
  for _, id in ipairs(ids) do
    out[#out + 1] = id
    out[#out + 1] = id .. '|p'
  end
  return out
end
