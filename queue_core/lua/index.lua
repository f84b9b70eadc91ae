--@include index
--[[
  index: list existing messages of one partition in the topic's indexes: the background build of
  a newly declared indexed field (and a rebuild). Backs DelayQueue.build_index().

  KEYS: the partition's keys.
  ARGV[1] the topic's index declaration the caller computed the entries for (the config's
          'indexes' field): a declaration changed since is refused with STALE_LAYOUT, nothing written
  ARGV[2] the entries of the messages that follow, "<length>:<entries>" each (includes/index.lua)
  ARGV[3..] per message, its id and the SHA-1 of the record the entries were computed from
  A message that no longer exists is skipped; one whose record changed since (a debounce or an
  edited replay wrote it, with its new payload's entries) keeps its entries and gains the header
  fields' (headers never change); a listed one gets its entries replaced (the same ones: a
  publish computes them from the same payload). Returns {CODE.OK, messages listed}.
]]
if ARGV[1] ~= (redis.call('HGET', P.config, 'indexes') or '') then return {CODE.STALE_LAYOUT} end
local n = (#ARGV - 2) / 2
local es = index_entries_of(ARGV[2], n)
local header_slot = {}
for _, pair in ipairs(cjson.decode(ARGV[1])) do
  if string.sub(pair[2], 1, 7) == 'header.' then header_slot[tostring(pair[1])] = true end
end

-- "<slot>\0<text>" pairs of an entries string, as {slot, text} lists.
local function entry_pairs(e)
  local parts, out = {}, {}
  for piece in string.gmatch(e .. '\0', '([^%z]*)%z') do parts[#parts + 1] = piece end
  for i = 1, #parts - 1, 2 do out[#out + 1] = {parts[i], parts[i + 1]} end
  return out
end

local ids, keep = {}, {}
for j = 1, n do
  local id, digest = ARGV[1 + 2 * j], ARGV[2 + 2 * j]
  local record = redis.call('HGET', P.msgs, id)
  if record and redis.sha1hex(record) == digest then
    ids[#ids + 1] = id; keep[#keep + 1] = es[j]
  elseif record and es[j] ~= '' then
    -- Rewritten since the read (a debounce, an edited replay): its payload fields' entries are its
    -- own new ones, but its headers stay, so the header fields being built still get theirs.
    local merged, seen = {}, {}
    for _, pair in ipairs(entry_pairs(redis.call('HGET', P.ixv, id) or '')) do
      seen[pair[1] .. '\0' .. pair[2]] = true
      merged[#merged + 1] = pair[1] .. '\0' .. pair[2]
    end
    for _, pair in ipairs(entry_pairs(es[j])) do
      local entry = pair[1] .. '\0' .. pair[2]
      if header_slot[pair[1]] and not seen[entry] then seen[entry] = true; merged[#merged + 1] = entry end
    end
    ids[#ids + 1] = id; keep[#keep + 1] = table.concat(merged, '\0')
  end
end
if #ids > 0 then
  index_remove(ids)
  index_add(ids, keep)
end
return {CODE.OK, #ids}
