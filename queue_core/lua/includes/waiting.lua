--@include
--[[
  waiting: finding one message in an ordered group's line (`waiting`, includes/ordering.lua), for
  the removals, holding areas and undo. Not in ordering.lua: the claim script includes that, and a
  Lua function has at most 200 locals (claim is at the limit).
]]

-- Members of one place read when looking for a member written before the id followed the place:
-- that format sorted a tie by due time, so the id is matched among these (a tie of more needed a
-- removal with a hold and an undo for each message in it).
local WAITING_OLD = 16

-- The member of message `id` at place `seq` of `okey`'s line, and its due time (digits): nil when
-- it is not there. One lex range for the exact prefix; a second only when that misses, for a
-- member written before the id followed the place.
local function waiting_find(gk, okey, seq, id)
  local place = okey .. '\0' .. string.format('%015d', seq) .. '\0'
  local m = redis.call('ZRANGEBYLEX', gk.waiting, '[' .. place .. id .. '\0', '(' .. place .. id .. '\1', 'LIMIT', 0, 1)[1]
  if m then return m, string.sub(m, #place + #id + 2) end
  local old = redis.call('ZRANGEBYLEX', gk.waiting, '[' .. place, '(' .. place .. '\255', 'LIMIT', 0, WAITING_OLD)
  for _, o in ipairs(old) do
    local due, who = string.match(string.sub(o, #place + 1), '^(%d+)%z(.*)$')
    if who == id and #due == 15 then return o, due end
  end
  return nil
end

-- Whether place (seq_a, id_a) comes before (seq_b, id_b) in a line: by place, then id in the
-- ZSET's byte order (Lua's < on strings follows the server's locale, strcoll).
local function place_before(seq_a, id_a, seq_b, id_b)
  if seq_a ~= seq_b then return seq_a < seq_b end
  for i = 1, math.min(#id_a, #id_b) do
    local x, y = string.byte(id_a, i), string.byte(id_b, i)
    if x ~= y then return x < y end
  end
  return #id_a < #id_b
end

-- Remove a held message's waiting entry (it is being deleted or cancelled while held): its own,
-- found by its id too (another message may wait at the same place). A chained child (score from
-- WAITING_SCORE) has no ordering key and no entry.
local function unhold(gk, id, score, okey)
  if okey == nil or okey == '' then return end
  local m = waiting_find(gk, okey, score - HELD_BASE, id)
  if m then redis.call('ZREM', gk.waiting, m) end
end
