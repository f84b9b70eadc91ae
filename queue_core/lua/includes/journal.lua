--@include
--[[
  journal: what handlers reported while they ran (queue_core/journal.py), in G.journal:
    "<id>|<k>"  chunk k of the log: lines "<ms>|<attempt>|<text>" joined by '\n'; a chunk takes
                lines until it holds JOURNAL_CHUNK bytes (a line is never split)
    "<id>|n"    "<first>|<next>|<lines>:<bytes>,..." the chunks kept (first .. next-1) and each
                one's size
    "<id>|p"    the latest progress "<fraction>|<ms>|<attempt>|<note>"
  Chunks, not one string and not one field per line: making a 64 KiB Lua string costs ~100 us (a
  report paid 1.8 ms per message at the cap that way), and deleting 100 fields per message made an
  ack of 100 logged messages take 8 ms. With 4 KiB chunks a report reads at most one (measured
  ~45 us per message at the cap) and a message's journal is at most ~20 fields (an ack of 100
  messages with full logs ~0.9 ms, against ~0.5 ms without). The oldest chunk goes once the rest still hold the last `max_lines` lines or `max_bytes`
  bytes, which readers show (journal.py trims to exactly that). Written by report.lua only;
  deleted with the message's other per-delivery records (leave.lua).
]]
local JOURNAL_CHUNK = 4096

local function journal_meta(gk, id)
  local raw = redis.call('HGET', gk.journal, id .. '|n')
  local first, nxt, sizes = 0, 0, {}
  if raw then
    local f, n, rest = string.match(raw, '^(%d+)|(%d+)|(.*)$')
    first, nxt = tonumber(f) or 0, tonumber(n) or 0
    for l, b in string.gmatch(rest or '', '(%d+):(%d+)') do sizes[#sizes + 1] = {tonumber(l), tonumber(b)} end
    if #sizes ~= nxt - first then first, nxt, sizes = nxt, nxt, {} end   -- unreadable: start afresh
  end
  return first, nxt, sizes
end

-- Appends `lines` to id's log and drops the chunks nobody will be shown: O(one chunk + lines).
local function append_lines(gk, id, lines, max_lines, max_bytes)
  local first, nxt, sizes = journal_meta(gk, id)
  local parts, lcount, bcount = {}, 0, 0
  if nxt > first and sizes[#sizes][2] < JOURNAL_CHUNK then   -- the last chunk has room: continue it
    nxt = nxt - 1
    parts[1] = redis.call('HGET', gk.journal, id .. '|' .. nxt) or ''
    lcount, bcount = sizes[#sizes][1], sizes[#sizes][2]
    sizes[#sizes] = nil
  end
  for _, line in ipairs(lines) do
    if lcount > 0 and bcount >= JOURNAL_CHUNK then   -- full: every chunk but the last holds >= 4 KiB
      redis.call('HSET', gk.journal, id .. '|' .. nxt, table.concat(parts, '\n'))
      sizes[#sizes + 1] = {lcount, bcount}
      nxt, parts, lcount, bcount = nxt + 1, {}, 0, 0
    end
    parts[#parts + 1] = line
    bcount = bcount + #line + (lcount > 0 and 1 or 0)
    lcount = lcount + 1
  end
  if lcount > 0 then
    redis.call('HSET', gk.journal, id .. '|' .. nxt, table.concat(parts, '\n'))
    sizes[#sizes + 1] = {lcount, bcount}
    nxt = nxt + 1
  end
  local total_l, total_b = 0, 0
  for _, s in ipairs(sizes) do total_l, total_b = total_l + s[1], total_b + s[2] end
  while #sizes > 1 and (total_l - sizes[1][1] >= max_lines or total_b - sizes[1][2] >= max_bytes) do
    redis.call('HDEL', gk.journal, id .. '|' .. first)
    total_l, total_b = total_l - sizes[1][1], total_b - sizes[1][2]
    table.remove(sizes, 1)
    first = first + 1
  end
  local out = {}
  for j, s in ipairs(sizes) do out[j] = s[1] .. ':' .. s[2] end
  redis.call('HSET', gk.journal, id .. '|n', first .. '|' .. nxt .. '|' .. table.concat(out, ','))
end

-- Deletes the journals of `ids` (progress, bookkeeping and chunks: ~20 fields at most each),
-- in HDELs of at most 1,000 fields (Lua's unpack has a limit).
local function drop_journals(gk, ids)
  local names = {}
  for j, id in ipairs(ids) do names[j] = id .. '|n' end
  local metas = redis.call('HMGET', gk.journal, unpack(names))
  local fields = {}
  for j, id in ipairs(ids) do
    fields[#fields + 1] = id .. '|p'
    if metas[j] then
      fields[#fields + 1] = names[j]
      local f, n = string.match(metas[j], '^(%d+)|(%d+)|')
      for k = tonumber(f) or 0, (tonumber(n) or 0) - 1 do fields[#fields + 1] = id .. '|' .. k end
    end
    if #fields >= 1000 then
      redis.call('HDEL', gk.journal, unpack(fields))
      fields = {}
    end
  end
  if #fields > 0 then redis.call('HDEL', gk.journal, unpack(fields)) end
end
