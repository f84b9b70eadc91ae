--@include
--[[
  waiting: finding one message in an ordered group's line (`waiting`, includes/ordering.lua), for
  the removals, the TTL's expiry, holding areas and undo (ordering.lua keeps the line itself:
  hold, promote, release). place_before is in hold.lua, its only user with undo.lua.
]]

-- The member of message `id` at place `seq` of `okey`'s line, and its due time (digits): nil when
-- it is not there. One lex range for the exact prefix; a second only when that misses, for a
-- member written before the id followed the place.
local function waiting_find(gk, okey, seq, id)
  local place = okey .. '\0' .. string.format('%015d', seq) .. '\0'
  local m = redis.call('ZRANGEBYLEX', gk.waiting, '[' .. place .. id .. '\0', '(' .. place .. id .. '\1', 'LIMIT', 0, 1)[1]
  if m then return m, string.sub(m, #place + #id + 2) end
  -- At most 16 members of one place: that format sorted a tie by due time, so the id is matched
  -- among them (a tie of more needed a removal with a hold and an undo for each message in it).
  local old = redis.call('ZRANGEBYLEX', gk.waiting, '[' .. place, '(' .. place .. '\255', 'LIMIT', 0, 16)
  for _, o in ipairs(old) do
    local due, who = string.match(string.sub(o, #place + 1), '^(%d+)%z(.*)$')
    if who == id and #due == 15 then return o, due end
  end
  return nil
end

-- Remove a held message's waiting entry (it is being deleted or cancelled while held): its own,
-- found by its id too (another message may wait at the same place). A chained child (score from
-- WAITING_SCORE) has no ordering key and no entry.
local function unhold(gk, id, score, okey)
  if okey == nil or okey == '' then return end
  local m = waiting_find(gk, okey, score - HELD_BASE, id)
  if m then redis.call('ZREM', gk.waiting, m) end
end
