--@include base, index
--[[
  index: list existing messages of one partition in the topic's indexes: the background build of
  a newly declared indexed field (and a rebuild). Backs DelayQueue.build_index().

  KEYS: the partition's keys.
  ARGV[1] the topic's index declaration the caller computed the entries for (the config's
          'indexes' field): a declaration changed since is refused with STALE_LAYOUT, nothing written
  ARGV[2] the entries of the messages that follow, "<length>:<entries>" each (includes/index.lua)
  ARGV[3..] per message, its id and the SHA-1 of the record the entries were computed from
  A message that no longer exists, or whose record changed since (a debounce or an edited replay
  wrote it, with its new entries), is skipped; a listed one gets its entries replaced (the same
  ones: a publish computes them from the same payload). Returns {CODE.OK, messages listed}.
]]
if ARGV[1] ~= (redis.call('HGET', P.config, 'indexes') or '') then return {CODE.STALE_LAYOUT} end
local n = (#ARGV - 2) / 2
local es = index_entries_of(ARGV[2], n)
local ids, keep = {}, {}
for j = 1, n do
  local id, digest = ARGV[1 + 2 * j], ARGV[2 + 2 * j]
  local record = redis.call('HGET', P.msgs, id)
  if record and redis.sha1hex(record) == digest then ids[#ids + 1] = id; keep[#keep + 1] = es[j] end
end
if #ids > 0 then
  index_remove(ids)
  index_add(ids, keep)
end
return {CODE.OK, #ids}
