--@include base, held, index
--[[
  index: list existing messages of one partition in the topic's indexes: the background build of
  a newly declared indexed field (and a rebuild). Backs DelayQueue.build_index().

  KEYS: the partition's keys.
  ARGV[1] the topic's index declaration the caller computed the entries for (the config's
          'indexes' field): a declaration changed since is refused with STALE_LAYOUT, nothing written
  ARGV[2] the messages' log entries (indexes.entries_blob)
  The entries of a message that no longer exists (stored, or held for undo in a live holding area)
  are left out. One rewritten since the caller read it (a debounce, an edited replay) got its new
  payload's entries from its writer, which knew the declaration (a stale one is refused): the old
  payload's are only extra candidates, and its headers never change. Returns {CODE.OK, messages
  listed}.

  Or, with ARGV[2] = '' and ARGV[3] = "<area>\n<cursor>", a read of the records held for undo: a
  message held before a field was declared must come back from undo with its entries, so the build
  lists those too. <area> is where the walk is (a live holding area's "<group>|<operation>", '' to
  begin), <cursor> an HSCAN cursor in it; areas go in byte order of their names (an area whose
  expiry an operation extends keeps its place), ARGV[4] records at most per call. Returns
  {CODE.OK, 0, next ("<area>\n<cursor>", '' when every area was read), id1, record1, ...}.
]]
if ARGV[1] ~= (redis.call('HGET', P.config, 'indexes') or '') then return {CODE.STALE_LAYOUT} end

local AREAS_MOST = 1000   -- live holding areas a read looks among

if ARGV[2] == '' and ARGV[3] and ARGV[3] ~= '' then
  local from, cursor = string.match(ARGV[3], '^([^\n]*)\n(%d+)$')
  if not from then return redis.error_reply('ERR malformed held-records cursor') end
  local area = nil   -- the first live area from `from` on
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', P.holds, now_ms(), '+inf', 'LIMIT', 0, AREAS_MOST)) do
    if not bytes_before(m, from) and (area == nil or bytes_before(m, area)) then area = m end
  end
  if not area then return {CODE.OK, 0, ''} end
  if area ~= from then cursor = '0' end   -- the area the cursor was in expired: the next from its start
  local scan = redis.call('HSCAN', hold_area_key(string.match(area, '^([^|]*)|(.*)$')), cursor, 'COUNT',
    tonumber(ARGV[4]) or 100)
  -- Past this area: the next name after it ("\0" sorts first; no name holds it).
  local out = {CODE.OK, 0, scan[1] == '0' and area .. '\0\n0' or area .. '\n' .. scan[1]}
  for i = 1, #scan[2], 2 do
    local id = scan[2][i]
    -- ("~meta", "~unheld": the area's own fields; a message stored too is the walk of msgs')
    if string.sub(id, 1, 1) ~= '~' and redis.call('HEXISTS', P.msgs, id) == 0 then
      local ok, rec = pcall(cmsgpack.unpack, scan[2][i + 1])
      if ok and type(rec) == 'table' and type(rec.r) == 'string' then
        out[#out + 1] = id; out[#out + 1] = rec.r
      end
    end
  end
  return out
end

local out, listed, seen, areas = {}, 0, {}, false
-- Whether message `id` is stored, or held in a live holding area (more than index_held_areas looks
-- in: taken as held, as the sweep then keeps every entry).
local function exists(id)
  if redis.call('HEXISTS', P.msgs, id) == 1 then return true end
  if areas == false then areas = index_held_areas() end
  if areas == nil then return true end
  for _, k in ipairs(areas) do
    if redis.call('HEXISTS', k, id) == 1 then return true end
  end
  return false
end
for _, c in ipairs(index_chunks(ARGV[2])) do
  local keep = {}
  for entry in string.gmatch(c[2], '[^\n]+') do
    local id = string.sub(entry, INDEX_HASH + 1)
    if seen[id] == nil then
      seen[id] = exists(id)
      if seen[id] then listed = listed + 1 end
    end
    if seen[id] then keep[#keep + 1] = entry .. '\n' end
  end
  if #keep > 0 then out[#out + 1] = {c[1], table.concat(keep)} end
end
index_write(out)
return {CODE.OK, listed}
