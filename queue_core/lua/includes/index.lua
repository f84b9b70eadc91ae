--@include base, held
--[[
  Indexed fields (issue 36; what a message's entries are: queue_core/indexes.py). The entries of a
  partition are a log: INDEX_SHARDS strings "<P.ixs>:<shard>" (keys.index_log_keys), each entry
  "<hash><id>\n" (INDEX_HASH letters a..p, then the message's id). A publish APPENDs its call's
  entries, one command per shard whatever the number of messages; an equality query reads the one
  shard its value hashes to and takes the ids after each copy of the hash (candidates: the search
  checks every one against the whole query).

  Nothing is taken out when a message leaves: the removal counts it (P.ixs "g"), and once as many
  have gone since the last sweep as are left, the removals sweep the log a bounded step a call,
  one shard after the other: the entries of an id still stored (or held for undo in a live
  holding area) are copied to "<P.ixs>:t", which then replaces the shard, with what was appended
  to it meanwhile. So a log holds every entry of every stored message, and some of messages that
  are gone (never more than about as many as it has live ones, plus one sweep's lag); a rewritten
  message (debounce, an edited replay in place) keeps its old entries as extra candidates.
  P.ixs: "g" gone since the last sweep began; "s", "o", "e" the sweep's shard, offset in it and the
  shard's length when its sweep began (absent: no sweep); "v<shard>" bumped when a sweep replaces
  that shard (a search reads a shard in pieces: engine/find.py _index_candidates); "r:<id>" the
  entries a rewritten message last got, "rn" how many such (index_rewritten). Absent altogether:
  no log.
]]

local SWEEP_MIN = 1024                -- a log is swept once this many messages have gone, and as many
local SWEEP_CALL_MOST = 2048          -- as are left; entries one script call checks at most
local index_swept = 0                 -- entries this script call has checked (removals leave id by id)
local SWEEP_AREAS = 8                 -- live holding areas looked into (more: nothing missing is dropped)

local function index_log(shard) return P.ixs .. ':' .. shard end

-- The chunks of a call's entries as the client sends them, "<shard>:<length>:<entries>" per shard
-- (indexes.entries_blob): {shard, entries} pairs. index_blob() writes them back.
local function index_chunks(blob)
  local out, pos = {}, 1
  while blob and pos <= #blob do
    local shard, len, start = string.match(blob, '^(%d+):(%d+):()', pos)
    if not shard then break end
    len = tonumber(len)
    out[#out + 1] = {shard, string.sub(blob, start, start + len - 1)}
    pos = start + len
  end
  return out
end

local function index_blob(chunks)
  local out = {}
  for i, c in ipairs(chunks) do out[i] = c[1] .. ':' .. #c[2] .. ':' .. c[2] end
  return table.concat(out)
end

-- Append entries: index_chunks' pairs (index_write), or a blob as the client sends it (index_append).
local function index_write(chunks)
  if #chunks == 0 then return end
  redis.call('HSETNX', P.ixs, 'g', 0)   -- the removals count from now on
  for _, c in ipairs(chunks) do redis.call('APPEND', index_log(c[1]), c[2]) end
end

local function index_append(blob) index_write(index_chunks(blob)) end

-- A publish's entries (argument `at`) as index_chunks' pairs, and how many arguments after
-- argument `from` - 1 they take: a blob (a schedule's tick), or "@<shard>,<shard>,..." with each
-- of those shards' entries in an argument of its own from `from` on (publish_entries.entries_args:
-- appended as they are, where cutting a blob up would copy every byte in Lua).
local function index_call_chunks(args, at, from)
  local spec = args[at]
  if string.byte(spec, 1) ~= 64 then return index_chunks(spec), 0 end   -- 64: '@'
  local out = {}
  for shard in string.gmatch(spec, '%d+') do out[#out + 1] = {shard, args[from + #out]} end
  return out, #out
end

-- The same entries (index_chunks' pairs) with message `id` in place of whichever id they name, as
-- a blob (a debounced publish's entries go to the message it rewrote; an edited replay's to its copy).
local function index_rehomed(chunks, id)
  local out = {}
  for i, c in ipairs(chunks) do out[i] = {c[1], (string.gsub(c[2], '([a-p]+)[^\n]*\n', '%1' .. id .. '\n'))} end
  return index_blob(out)
end

-- Message `id` was rewritten in place (a debounce, an edited replay): its new entries (rehomed to
-- it) are appended, unless they are the ones it got at its last rewrite: P.ixs "r:<id>" keeps those
-- while it lives ("rn" counts such marks), so a key debounced all day with the same indexed values
-- does not grow the log. Its older entries stay, extra candidates, until it leaves.
local function index_rewritten(id, blob)
  if blob == '' then return end
  local mark = 'r:' .. id
  if redis.call('HGET', P.ixs, mark) == blob then return end
  index_append(blob)
  if redis.call('HSET', P.ixs, mark, blob) == 1 then redis.call('HINCRBY', P.ixs, 'rn', 1) end
end

-- The keys of the partition's live holding areas (nil: more than SWEEP_AREAS, too many to look in).
local function index_held_areas()
  local live = redis.call('ZRANGEBYSCORE', P.holds, now_ms(), '+inf', 'LIMIT', 0, SWEEP_AREAS + 1)
  if #live > SWEEP_AREAS then return nil end
  local keys = {}
  for i, m in ipairs(live) do keys[i] = hold_area_key(string.match(m, '^([^|]*)|(.*)$')) end
  return keys
end

local CLEAN_ENTRY = '^' .. string.rep('[a-p]', INDEX_HASH) .. '[^a-p\n]'

-- Check up to `budget` entries of the sweep under way, from where it stopped. The survivors of a
-- piece go on as whole runs of it: a string per run, not per entry (Lua's garbage collector walks
-- every loaded script's objects, so each string made costs far more than its bytes).
local function index_sweep(budget)
  index_swept = index_swept + budget
  local st = redis.call('HMGET', P.ixs, 's', 'o', 'e')
  local s, o, e = tonumber(st[1]), tonumber(st[2]) or 0, tonumber(st[3])
  if not s then return end
  local temp, areas = index_log('t'), false
  -- Whether entry `id` stays; each command it takes counts against the budget.
  local function kept(id)
    budget = budget - 1
    if redis.call('HEXISTS', P.msgs, id) == 1 then return true end
    if areas == false then areas = index_held_areas() end
    if areas == nil then return true end   -- too many areas to look in: kept for a later sweep
    for _, k in ipairs(areas) do
      budget = budget - 1
      if redis.call('HEXISTS', k, id) == 1 then return true end
    end
    return false
  end
  while budget > 0 do
    local log = index_log(s)
    if not e then e = redis.call('STRLEN', log) end
    if o < e then
      -- Whole entries only (each ends with "\n"; an entry is < 64 bytes, a read >= 256).
      local piece = redis.call('GETRANGE', log, o, o + math.min(e - o, math.max(256, budget * 48), 65536) - 1)
      local keep, pos, run = {}, 1, nil   -- run: where the current run of kept entries began
      while budget > 0 do
        local nl = string.find(piece, '\n', pos, true)
        if not nl then break end
        if nl - pos <= 64 and string.find(piece, CLEAN_ENTRY, pos) then
          if kept(string.sub(piece, pos + INDEX_HASH, nl - 1)) then
            run = run or pos
          elseif run then
            keep[#keep + 1] = string.sub(piece, run, pos - 1); run = nil
          end
        else
          -- Not an entry as written (a hand edit glued bytes before one): the entry is the last
          -- run of letters and the id after it, as a query reads it (engine/find.py); the rest goes.
          if run then keep[#keep + 1] = string.sub(piece, run, pos - 1); run = nil end
          -- (Its last 64 bytes: an entry is shorter, and the match stays linear on a long line.)
          local letters, id = string.match(string.sub(piece, math.max(pos, nl - 64), nl - 1), '([a-p]+)([^a-p]*)$')
          if letters and #letters >= INDEX_HASH and id ~= '' and kept(id) then
            keep[#keep + 1] = string.sub(letters, -INDEX_HASH) .. id .. '\n'
          end
        end
        pos = nl + 1
      end
      if run then keep[#keep + 1] = string.sub(piece, run, pos - 1) end
      if #keep > 0 then redis.call('APPEND', temp, table.concat(keep)) end
      -- No end of line in a whole piece: bytes that are no entry (never written so). Skip the piece;
      -- the next one reads the rest of that line as one, whose entry (if any) the slow path keeps.
      if pos == 1 then pos = math.max(#piece, 1) + 1; budget = budget - 1 end
      o = o + pos - 1
    else
      -- The shard's old part is swept: what was appended since goes along unchecked.
      if redis.call('STRLEN', log) > e then redis.call('APPEND', temp, redis.call('GETRANGE', log, e, -1)) end
      if redis.call('EXISTS', temp) == 1 then redis.call('RENAME', temp, log) else redis.call('DEL', log) end
      redis.call('HINCRBY', P.ixs, 'v' .. s, 1)   -- a reader in pieces reads the shard again
      s, o, e = s + 1, 0, nil
      if s >= INDEX_SHARDS then
        redis.call('HDEL', P.ixs, 's', 'o', 'e')
        local left = 0
        for shard = 0, INDEX_SHARDS - 1 do left = left + redis.call('EXISTS', index_log(shard)) end
        if left == 0 then redis.call('DEL', P.ixs) end   -- no entry left: no log (removals stop counting)
        return
      end
    end
  end
  redis.call('HSET', P.ixs, 's', s, 'o', o, 'e', e or redis.call('STRLEN', index_log(s)))
end

-- Start a sweep of the whole log now, unless one is under way. Returns whether there is a log.
local function index_sweep_start()
  if redis.call('EXISTS', P.ixs) == 0 then return false end
  if not redis.call('HGET', P.ixs, 's') then
    redis.call('HSET', P.ixs, 's', 0, 'o', 0, 'g', 0)
    redis.call('HDEL', P.ixs, 'e')
    redis.call('DEL', index_log('t'))   -- left by a sweep whose state was lost: never of this one
  end
  return true
end

-- `n` messages left the partition (includes/leave.lua): counted, and a sweep step taken when one
-- is under way or due (as many gone as left, or none left): 3 entries a message and 128 more, at
-- most SWEEP_CALL_MOST a script call (~3 us an entry on the 2-core test machine: a removal call
-- of 1,000 messages takes ~7 ms more while a sweep is under way). One EXISTS for a topic without
-- a log.
local function index_leave(gone)
  if redis.call('EXISTS', P.ixs) == 0 then return end
  local n = #gone
  local g = redis.call('HINCRBY', P.ixs, 'g', n)
  if (tonumber(redis.call('HGET', P.ixs, 'rn')) or 0) > 0 then   -- marks of rewritten messages go with them
    for i = 1, n, 1000 do
      local marks = {}
      for j = i, math.min(n, i + 999) do marks[#marks + 1] = 'r:' .. gone[j] end
      local dropped = redis.call('HDEL', P.ixs, unpack(marks))
      if dropped > 0 then redis.call('HINCRBY', P.ixs, 'rn', -dropped) end
    end
  end
  local budget = math.min(SWEEP_CALL_MOST - index_swept, 3 * n + 128)
  if budget <= 0 then return end
  if not redis.call('HGET', P.ixs, 's') then
    -- (msgs may hold the field that keeps it a hashtable, keys.HASHTABLE_FIELD: "1" is empty.)
    local left = redis.call('HLEN', P.msgs)
    if (g < SWEEP_MIN or g < left) and left > 1 then return end
    index_sweep_start()
  end
  index_sweep(budget)
end
