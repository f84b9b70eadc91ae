--@include index
--[[
  index: list existing messages of one partition in the topic's indexes: the background build of
  a newly declared indexed field (and a rebuild). Backs DelayQueue.build_index().

  KEYS: the partition's keys.
  ARGV[1] the topic's index declaration the caller computed the entries for (the config's
          'indexes' field): a declaration changed since is refused with STALE_LAYOUT, nothing written
  ARGV[2] the messages' log entries (indexes.entries_blob)
  The entries of a message that no longer exists are left out. One rewritten since the caller read
  it (a debounce, an edited replay) got its new payload's entries from its writer, which knew the
  declaration (a stale one is refused): the old payload's are only extra candidates, and its
  headers never change. Returns {CODE.OK, messages listed}.
]]
if ARGV[1] ~= (redis.call('HGET', P.config, 'indexes') or '') then return {CODE.STALE_LAYOUT} end
local out, listed, seen = {}, 0, {}
for _, c in ipairs(index_chunks(ARGV[2])) do
  local keep = {}
  for entry in string.gmatch(c[2], '[^\n]+') do
    local id = string.sub(entry, INDEX_HASH + 1)
    if seen[id] == nil then
      seen[id] = redis.call('HEXISTS', P.msgs, id) == 1
      if seen[id] then listed = listed + 1 end
    end
    if seen[id] then keep[#keep + 1] = entry .. '\n' end
  end
  if #keep > 0 then out[#out + 1] = {c[1], table.concat(keep)} end
end
index_write(out)
return {CODE.OK, listed}
