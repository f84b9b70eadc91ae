--@include held, index
--[[
  index: list existing messages of one partition in the topic's indexes: the background build of
  a newly declared indexed field (and a rebuild), and undo's listing of held messages in the
  fields that were not ready when they were held. Backs DelayQueue.build_index() and undo
  (engine/index.py _index_held).

  KEYS: the partition's keys.
  ARGV[1] the topic's index declaration the caller computed the entries for (the config's
          'indexes' field): a declaration changed since is refused with STALE_LAYOUT, nothing written
  ARGV[2] the messages' log entries (indexes.entries_blob: "<hashes>:<ids>")
  ARGV[3] (optional) "<group>|<operation>": a holding area (includes/hold.lua) whose messages count
          as existing
  The entries of a message that no longer exists are left out. One rewritten since the caller read
  it (a debounce, an edited replay) got its new payload's entries from its writer, which knew the
  declaration (a stale one is refused): the old payload's are only extra candidates, and its
  headers never change. Returns {CODE.OK, messages listed}.

  Or, with ARGV[2] = '', a read of that holding area's records: ARGV[4] an HSCAN cursor in it,
  ARGV[5] fields at most (and HELD_CALL_BYTES of them, as undo.lua reads: held_rows). Messages
  stored in the partition too are left out (a build walks those). Returns {CODE.OK, 0, next
  cursor ('0': the area is read), id1, record1, ...}.
]]
if ARGV[1] ~= (redis.call('HGET', P.config, 'indexes') or '') then return {CODE.STALE_LAYOUT} end

local area = nil
if ARGV[3] and ARGV[3] ~= '' then area = hold_area_key(string.match(ARGV[3], '^([^|]*)|(.*)$')) end

if ARGV[2] == '' and area then
  local cursor, rows = held_rows(area, ARGV[4], tonumber(ARGV[5]))
  local out = {CODE.OK, 0, cursor}
  for i = 1, #rows, 2 do
    local id = rows[i]
    -- ("~meta", "~ix", ...: the area's own fields)
    if string.sub(id, 1, 1) ~= '~' and redis.call('HEXISTS', P.msgs, id) == 0 then
      local ok, rec = pcall(cmsgpack.unpack, rows[i + 1])
      if ok and type(rec) == 'table' and type(rec.r) == 'string' then
        out[#out + 1] = id; out[#out + 1] = rec.r
      end
    end
  end
  return out
end

local listed, seen = 0, {}
local function exists(id)
  return redis.call('HEXISTS', P.msgs, id) == 1 or (area ~= nil and redis.call('HEXISTS', area, id) == 1)
end
-- The entries of the messages that exist, in runs (a message's entries sit side by side).
local pair = index_pair(ARGV[2])
local hashes, ids = pair[1], pair[2]
local n = #hashes / INDEX_HASH
local w = n > 0 and #ids / n or 0
local kept_hashes, kept_ids = index_kept_runs(hashes, ids, w, n, function(id)
  if seen[id] == nil then
    seen[id] = exists(id)
    if seen[id] then listed = listed + 1 end
  end
  return seen[id]
end)
index_write({kept_hashes, kept_ids})
return {CODE.OK, listed}
