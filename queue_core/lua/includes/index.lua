--@include base, held
--[[
  Indexed fields (issue 36; what a message's entries are: queue_core/indexes.py). The entries of a
  partition are a log in INDEX_LANES lanes (keys.index_log_keys), each two strings side by side:
  "<P.ixs>:h<lane>" holds each entry's hash (INDEX_HASH letters a..p), "<P.ixs>:i<lane>" the id of
  its message (every id of a partition has one width: keys.id_for_partition), entry k at
  k * INDEX_HASH and k * width. A publish APPENDs its call's hashes as one string and their ids as
  another, to the next lane in turn (two commands whatever the number of messages, and the client
  lays them out with two joins, no work an entry; the lanes keep each string an eighth of the log,
  as Redis copies a growing string past 1 MB whole at every 1 MB it grows: one string of a
  million entries made each append ~3x dearer). An equality query reads every lane's hashes,
  takes the entries where its value's hash starts on an entry's boundary, and reads those
  entries' ids (candidates: the search checks every one against the whole query). A lane's two
  strings only ever change together, in one script: a hand edit that leaves them disagreeing in
  length makes queries walk the state and sweeps leave that lane alone.

  Nothing is taken out when a message leaves: the removal counts it (P.ixs "g"), and once as many
  have gone since the last sweep as are left, the removals sweep the log a bounded step a call,
  one lane after the other: the entries of an id still stored (or held for undo in a live holding
  area) are copied to "<P.ixs>:ht" and "<P.ixs>:it", which then replace the lane, with what was
  appended to it meanwhile. So a log holds every entry of every stored message, and some of
  messages that are gone (never more than about as many as it has live ones, plus one sweep's
  lag); a rewritten message (debounce, an edited replay in place) keeps its old entries as extra
  candidates.
  P.ixs: "c" the calls that appended (the next lane: c % INDEX_LANES); "g" gone since the last
  sweep began; "ls" "lo" "le" "lw" a sweep's lane, the entries it has checked there, and that
  lane's entries and id width when its sweep began (absent: no sweep); "v<lane>" bumped when a sweep
  replaces that lane (a search reads the log in pieces: engine/index.py _index_candidates);
  "r:<id>" the entries a rewritten message last got, "rn" how many such (index_rewritten).
  Absent altogether: no log.
]]

local SWEEP_MIN = 1024                -- a log is swept once this many messages have gone, and as many
local SWEEP_CALL_MOST = 2048          -- as are left; entries one script call checks at most
local index_swept = 0                 -- entries this script call has checked (removals leave id by id)
local SWEEP_AREAS = 8                 -- live holding areas looked into (more: nothing missing is dropped)

local function index_log(part) return P.ixs .. ':' .. part end

-- A call's entries, as a pair {hashes, ids}: INDEX_HASH letters an entry, then each entry's id.
-- As the client sends them in one argument (indexes.entries_blob): "<hashes>:<ids>" ('' = none).
-- A blob that is not one gives no entries.
local function index_pair(blob)
  local hashes, ids = string.match(blob or '', '^([a-p]*):([^:]*)$')
  if not hashes or #hashes % INDEX_HASH ~= 0 or (#hashes == 0) ~= (#ids == 0)
      or (#hashes > 0 and #ids % (#hashes / INDEX_HASH) ~= 0) then return {'', ''} end
  return {hashes, ids}
end

-- Append a pair's entries to the next lane (index_write), or a blob's as the client sends it
-- (index_append). (P.ixs "c" also makes the hash exist: the removals count from now on.)
local function index_write(pair)
  if pair[1] == '' then return end
  local lane = redis.call('HINCRBY', P.ixs, 'c', 1) % INDEX_LANES
  redis.call('APPEND', index_log('h' .. lane), pair[1])
  redis.call('APPEND', index_log('i' .. lane), pair[2])
end

local function index_append(blob) index_write(index_pair(blob)) end

-- A publish's entries (argument `at`) as a pair, and how many arguments after argument `from` - 1
-- they take: a blob (a schedule's tick), or '@' with the hashes and the ids in the two arguments
-- from `from` on (publish_entries.entries_args: appended as they are, where cutting a blob in two
-- would copy every byte in Lua).
local function index_call_entries(args, at, from)
  if args[at] ~= '@' then return index_pair(args[at]), 0 end
  return {args[from], args[from + 1]}, 2
end

-- The same entries with message `id` in place of whichever ids they name, as a blob (a debounced
-- publish's entries go to the message it rewrote; an edited replay's to its copy).
local function index_rehomed(pair, id)
  if pair[1] == '' then return '' end
  return pair[1] .. ':' .. string.rep(id, #pair[1] / INDEX_HASH)
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

-- The entries of a piece of a log (`n` entries: `hashes`, and `ids` of width `w`) that keep(id)
-- keeps, as whole runs: a string per run, not per entry (Lua's garbage collector walks every
-- loaded script's objects, so each string made costs far more than its bytes). Returns their
-- hashes, their ids and the entries looked at (keep returning nil stops there).
local function index_kept_runs(hashes, ids, w, n, keep)
  local hk, ik, run, j = {}, {}, nil, 0   -- run: the entry the current run of kept ones began at
  local function close()
    hk[#hk + 1] = string.sub(hashes, run * INDEX_HASH + 1, j * INDEX_HASH)
    ik[#ik + 1] = string.sub(ids, run * w + 1, j * w)
    run = nil
  end
  while j < n do
    local k = keep(string.sub(ids, j * w + 1, (j + 1) * w))
    if k == nil then break end
    if k then run = run or j elseif run then close() end
    j = j + 1
  end
  if run then close() end
  return table.concat(hk), table.concat(ik), j
end

-- Check up to `budget` entries of the sweep under way, from where it stopped (each entry costs
-- one, and each command a check takes one more); the survivors go on in runs (index_kept_runs).
local function index_sweep(budget)
  index_swept = index_swept + budget
  local st = redis.call('HMGET', P.ixs, 'ls', 'lo', 'le', 'lw')
  local s = tonumber(st[1])
  if not s then return end
  local o, e, w = tonumber(st[2]) or 0, tonumber(st[3]), tonumber(st[4])
  local htemp, itemp = index_log('ht'), index_log('it')
  local areas = false
  -- A lane's entries and id width, or nil when its two strings disagree (a hand edit; an id is
  -- shorter than 64). A lane of ids with no hashes holds no entry: 0 entries (its ids are dropped).
  -- (Local here: a script's main function takes at most 200 locals, and the includes share it.)
  local function index_shape(lane)
    local hl, il = redis.call('STRLEN', index_log('h' .. lane)), redis.call('STRLEN', index_log('i' .. lane))
    if hl == 0 then return 0, 0 end
    local n = hl / INDEX_HASH
    if hl % INDEX_HASH ~= 0 or il % n ~= 0 or il / n > 64 or il == 0 then return nil end
    return n, il / n
  end
  -- Whether entry `id` stays; each command it takes counts against the budget.
  local function kept(id)
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
    local hlog, ilog = index_log('h' .. s), index_log('i' .. s)
    local damaged = false
    if not (e and w) then
      o, e, w = 0, index_shape(s)
      budget = budget - 1
      if not e then damaged, e, w = true, 0, 0 end   -- its strings disagree: left as it is
    end
    if budget <= 0 and o < e then break end   -- (GETRANGE of 0 entries would read the whole lane)
    if o < e then
      local k = math.min(e - o, budget, 1024)
      local hashes = redis.call('GETRANGE', hlog, o * INDEX_HASH, (o + k) * INDEX_HASH - 1)
      local ids = redis.call('GETRANGE', ilog, o * w, (o + k) * w - 1)
      local last, last_kept = nil, false      -- a message with several entries has them side by side
      local kept_hashes, kept_ids, j = index_kept_runs(hashes, ids, w, k, function(id)
        if budget <= 0 then return nil end
        budget = budget - 1
        if id ~= last then last, last_kept = id, kept(id) end
        return last_kept
      end)
      if kept_hashes ~= '' then
        redis.call('APPEND', htemp, kept_hashes)
        redis.call('APPEND', itemp, kept_ids)
      end
      o = o + j
    else
      if not damaged then
        -- The lane's old part is swept: what was appended since goes along unchecked.
        if e > 0 and redis.call('STRLEN', hlog) > e * INDEX_HASH then
          redis.call('APPEND', htemp, redis.call('GETRANGE', hlog, e * INDEX_HASH, -1))
          redis.call('APPEND', itemp, redis.call('GETRANGE', ilog, e * w, -1))
        end
        if redis.call('EXISTS', htemp) == 1 then
          redis.call('RENAME', htemp, hlog)
          redis.call('RENAME', itemp, ilog)
          redis.call('HINCRBY', P.ixs, 'v' .. s, 1)   -- a reader in pieces reads the log again
        elseif redis.call('DEL', hlog, ilog) > 0 then   -- (and ids without hashes: no entry)
          redis.call('HINCRBY', P.ixs, 'v' .. s, 1)
        end
      end
      s, o, e, w = s + 1, 0, nil, nil
      if s >= INDEX_LANES then
        redis.call('HDEL', P.ixs, 'ls', 'lo', 'le', 'lw')
        local left = 0
        for lane = 0, INDEX_LANES - 1 do
          left = left + redis.call('EXISTS', index_log('h' .. lane), index_log('i' .. lane))
        end
        if left == 0 then redis.call('DEL', P.ixs) end   -- no entry left: no log (removals stop counting)
        return
      end
    end
  end
  if e then
    redis.call('HSET', P.ixs, 'ls', s, 'lo', o, 'le', e, 'lw', w)
  else
    redis.call('HSET', P.ixs, 'ls', s, 'lo', 0)
    redis.call('HDEL', P.ixs, 'le', 'lw')
  end
end

-- Start a sweep of the whole log now, unless one is under way. Returns whether there is a log.
local function index_sweep_start()
  if redis.call('EXISTS', P.ixs) == 0 then return false end
  if not redis.call('HGET', P.ixs, 'ls') then
    redis.call('HSET', P.ixs, 'ls', 0, 'lo', 0, 'g', 0)
    redis.call('HDEL', P.ixs, 'le', 'lw')
    redis.call('DEL', index_log('ht'), index_log('it'))   -- left by a sweep whose state was lost
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
  if not redis.call('HGET', P.ixs, 'ls') then
    -- (msgs may hold the field that keeps it a hashtable, keys.HASHTABLE_FIELD: "1" is empty.)
    local left = redis.call('HLEN', P.msgs)
    if (g < SWEEP_MIN or g < left) and left > 1 then return end
    index_sweep_start()
  end
  index_sweep(budget)
end
