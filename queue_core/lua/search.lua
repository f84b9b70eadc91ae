--@include base, record, cursor, rows
--[[
  search: a bounded scan of one state of one group for the messages that match a query (the terms
  and their rules: queue_core/query.py, whose Query.matches is the same evaluation in Python).
  Read only. Walks the state in (score, id) order from a cursor and stops once it has examined its
  quota of members or read its quota of bytes, spent its time budget, found `limit` matches,
  passed the end score or reached the end of the set. Backs DelayQueue.search(), which sizes the
  quotas from the time its previous calls took, aiming at a few milliseconds each: the quotas are
  the bound that always holds, because Valkey (and Redis where scripts see a frozen clock) answers
  TIME inside a script with the script's start time; where the clock moves, the time budget
  (read every 16 members and after every payload over 4 KiB) stops a call early too.

  A payload or header term first looks for the value's literal pieces in the raw JSON (when it
  holds no escapes, so the bytes are the text): most members are rejected without decoding.

  KEYS: the partition's keys, then the group's keys.
  ARGV[1] state   ARGV[2] cursor score ('' = from the start)   ARGV[3] cursor id: the walk starts
  after (score, id) in its order   ARGV[4] '1' = descending (score, id)
  ARGV[5] end score ('' = none): the walk stops at the first member past it
  ARGV[6] limit: matches to find (<= 1000)   ARGV[7] time budget in microseconds (<= 50000)
  ARGV[8] members to examine at most (<= 50000)   ARGV[9] bytes of JSON to decode at most (<= 8 MiB;
  a member is examined whole, so one large payload can pass it once)
  ARGV[10] the number of candidate ids at the end of ARGV ('' = none): the walk then examines
  those, in the order given (the candidates of an equality term on an indexed field, which the
  caller read from the index log: DelayQueue._index_candidates; ARGV[2] and ARGV[3] unused),
  keeps those in the state whose score is within ARGV[11]..ARGV[12] ('' = unbounded), and checks
  every term on each (an entry is only a candidate). Bounded by the same quotas; done when every
  candidate given was examined.
  ARGV[13...] the terms, 5 per term: field, dotted path ('' for none), op, value, the value as a
  number ('' when it is not a plain number or has a wildcard); then the candidates (ARGV[10])
  Returns {examined, done ('1' when the walk reached the end or the end score, else ''), last
  score, last id (the cursor of the next call; '' when none was examined), then one 9-tuple per
  match as peek.lua returns them: id, score, record or '', info or '', attempts or '', lease or '',
  traceback or '', dispatch or '', holder of a held row or ''}.
]]
local key = G[ARGV[1]]
local descending = ARGV[4] == '1'
local end_score = tonumber(ARGV[5])
local limit = math.min(tonumber(ARGV[6]), 1000)
local budget = math.min(tonumber(ARGV[7]), 50000)
local max_members = math.min(tonumber(ARGV[8]), 50000)
local max_bytes = math.min(tonumber(ARGV[9]), 8388608)
local bytes_read = 0
local CHUNK = 64

local function clock_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local started = clock_us()

-- The terms, cheapest first: the walk rejects a member on its first failing term.
local COST = {id = 1, attempts = 2, priority = 2, fairness_key = 2, key = 3, order_key = 3, fingerprint = 4, error = 4,
  header = 5, payload = 6}
local given = tonumber(ARGV[10]) or 0   -- candidate ids at the end of ARGV
local terms = {}
for i = 13, #ARGV - given, 5 do
  local t = {field = ARGV[i], op = ARGV[i + 2], value = ARGV[i + 3], number = tonumber(ARGV[i + 4]), path = {}}
  for seg in string.gmatch(ARGV[i + 1], '[^.]+') do t.path[#t.path + 1] = seg end
  t.pieces = {}
  for piece in string.gmatch(t.value .. '*', '([^*]*)%*') do t.pieces[#t.pieces + 1] = piece end
  t.glob = #t.pieces > 1
  if t.field == 'error' then
    t.value = string.lower(t.value)
    t.glob, t.pieces = true, {''}
    for piece in string.gmatch(t.value .. '*', '([^*]*)%*') do t.pieces[#t.pieces + 1] = piece end
    t.pieces[#t.pieces + 1] = ''
  end
  terms[#terms + 1] = t
end
table.sort(terms, function(a, b) return COST[a.field] < COST[b.field] end)

-- `*` matches any run of characters: the first piece starts the text, the last ends it, the
-- others appear in order (leftmost each). Linear, no patterns (a value is never a Lua pattern).
local function glob(t, s)
  if not t.glob then return t.value == s end
  local pieces, n = t.pieces, #t.pieces
  local first, last = pieces[1], pieces[n]
  if #s < #first + #last or string.sub(s, 1, #first) ~= first then return false end
  local pos, stop = #first + 1, #s - #last
  for i = 2, n - 1 do
    local p = pieces[i]
    if p ~= '' then
      local a, b = string.find(s, p, pos, true)
      if not a or b > stop then return false end
      pos = b + 1
    end
  end
  return last == '' or string.sub(s, -#last) == last
end

-- Could the raw JSON text hold the value? Without a backslash the bytes are the text, so a piece
-- missing from them rules the member out; with one (escapes), decoding decides.
local function may_hold(t, raw)
  if t.number or string.find(raw, '\\', 1, true) then return true end
  for _, p in ipairs(t.pieces) do
    if p ~= '' and not string.find(raw, p, 1, true) then return false end
  end
  return true
end

local function scalar_text(v)
  if v == cjson.null then return 'null' end
  local kind = type(v)
  if kind == 'boolean' then return v and 'true' or 'false' end
  if kind == 'number' then
    if v == math.floor(v) and math.abs(v) < 1e15 then return string.format('%d', v) end
    return tostring(v)
  end
  if kind == 'string' then return v end
  return nil
end

local function value_matches(t, v)
  if type(v) == 'table' then
    if v[1] == nil then return false end   -- an object (or an empty list): never equal to a value
    for _, item in ipairs(v) do
      if type(item) ~= 'table' and value_matches(t, item) then return true end
    end
    return false
  end
  if t.number and type(v) == 'number' then return v == t.number end
  local s = scalar_text(v)
  return s ~= nil and glob(t, s)
end

local function at_path(v, path)
  for _, seg in ipairs(path) do
    if type(v) ~= 'table' then return nil end
    if v[1] ~= nil and string.match(seg, '^%d+$') then v = v[tonumber(seg) + 1] else v = v[seg] end
    if v == nil then return nil end
  end
  return v
end

local function decode(raw)
  bytes_read = bytes_read + #raw
  local ok, v = pcall(cjson.decode, raw)
  if ok and type(v) == 'table' then return v end
  return nil
end

local decoded_large   -- set when a member cost a large decode: read the clock now, not later

-- One member against every term; the record and records of the group are read only when a term
-- needs them, each at most once.
local function matches(id)
  local record, h, info, dispatch, docs = nil, nil, nil, nil, {}
  local function header()
    if record == nil then
      record = redis.call('HGET', P.msgs, id) or ''
      h = parse_header(record)
    end
    return h
  end
  for _, t in ipairs(terms) do
    local f = t.field
    if f == 'id' then
      if not glob(t, id) then return false end
    elseif f == 'attempts' then
      local n
      if ARGV[1] == 'unacked' then
        local lease = redis.call('HGET', G.leases, id)
        n = lease and tonumber(string.match(lease, '^[^|]*|(%d+)')) or 0
      else
        n = tonumber(redis.call('HGET', G.att, id)) or 0
      end
      local want = tonumber(t.value)
      local ok = (t.op == ':' and n == want) or (t.op == '>=' and n >= want) or (t.op == '<=' and n <= want)
        or (t.op == '>' and n > want) or (t.op == '<' and n < want)
      if not ok then return false end
    elseif f == 'priority' or f == 'fairness_key' then
      -- The dispatch field "<priority>|<fairness key>" (none: priority 0, no key).
      if dispatch == nil then dispatch = redis.call('HGET', P.dispatch, id) or '0|' end
      local prio, fkey = string.match(dispatch, '^(%d*)|(.*)$')
      if f == 'fairness_key' then
        if not fkey or fkey == '' or not glob(t, fkey) then return false end
      else
        local n, want = tonumber(prio) or 0, tonumber(t.value)
        local ok = (t.op == ':' and n == want) or (t.op == '>=' and n >= want) or (t.op == '<=' and n <= want)
          or (t.op == '>' and n > want) or (t.op == '<' and n < want)
        if not ok then return false end
      end
    elseif f == 'key' or f == 'order_key' then
      local hh = header()
      local s = hh and (f == 'key' and hh.key or hh.okey) or ''
      if s == '' or not glob(t, s) then return false end
    elseif f == 'error' or f == 'fingerprint' then
      if info == nil then
        local raw = redis.call('HGET', G.info, id) or ''
        info = {raw = raw, lower = string.lower(raw)}
      end
      if f == 'error' and not may_hold(t, info.lower) then return false end
      if info.doc == nil then info.doc = decode(info.raw) or false end
      local err = info.doc and info.doc.err
      if type(err) ~= 'table' then return false end
      if f == 'fingerprint' then
        if type(err.fp) ~= 'string' or err.fp == '' or not glob(t, err.fp) then return false end
      else
        local et, em = tostring(err.t or ''), tostring(err.m or '')
        if not glob(t, string.lower(em ~= '' and (et .. ': ' .. em) or et)) then return false end
      end
    else   -- payload or header: a JSON path
      local hh = header()
      if not hh then return false end
      local raw = f == 'payload' and string.sub(record, hh.body) or hh.hdr
      if raw == '' or not may_hold(t, raw) then return false end
      if docs[f] == nil then
        docs[f] = decode(raw) or false
        if #raw > 4096 then decoded_large = true end
      end
      if not docs[f] then return false end
      local v = at_path(docs[f], t.path)
      if v == nil or not value_matches(t, v) then return false end
    end
  end
  return true
end

local out = {0, '', '', ''}
local examined, found, done = 0, 0, false
local last_score, last_id = '', ''

-- Quotas: true when the call must stop now.
local function spent()
  if examined >= max_members or bytes_read >= max_bytes then return true end
  if decoded_large or examined % 16 == 0 then
    decoded_large = false
    if clock_us() - started >= budget then return true end
  end
  return false
end

-- One member examined (`ok`: it is in range): a match is kept. True when the call must stop
-- now (the limit of matches reached, or a quota spent).
local function examine(id, score, ok)
  examined = examined + 1
  last_id = id
  if ok and matches(id) then
    found = found + 1
    append_row(out, id, score)
    if found >= limit then return true end
  end
  return spent()
end

local function walk_index()
  -- The candidates given, in their order.
  local low, high = tonumber(ARGV[11]), tonumber(ARGV[12])
  last_score = '0'
  for i = #ARGV - given + 1, #ARGV do
    local id = ARGV[i]
    local score = redis.call('ZSCORE', key, id)
    local s = score and tonumber(score)
    if examine(id, score, s and (not low or s >= low) and (not high or s <= high)) then return end
  end
  done = true
end

local function walk_state()
  local size = redis.call('ZCARD', key)
  local pos   -- the rank of the next member to examine
  if ARGV[2] == '' then
    pos = descending and size - 1 or 0
  else
    local first, below = split_at(key, ARGV[2], ARGV[3])
    pos = descending and below - 1 or first
  end

  while true do
    if pos < 0 or pos >= size then done = true; break end
    local rows
    if descending then
      local asc = redis.call('ZRANGE', key, math.max(0, pos - CHUNK + 1), pos, 'WITHSCORES')
      rows = {}
      for i = #asc - 1, 1, -2 do rows[#rows + 1] = asc[i]; rows[#rows + 1] = asc[i + 1] end
    else
      rows = redis.call('ZRANGE', key, pos, pos + CHUNK - 1, 'WITHSCORES')
    end
    if #rows == 0 then done = true; break end
    local stop = false
    for i = 1, #rows, 2 do
      local id, score = rows[i], rows[i + 1]
      local s = tonumber(score)
      if end_score and ((descending and s < end_score) or (not descending and s > end_score)) then
        done, stop = true, true
        break
      end
      last_score = score
      pos = descending and pos - 1 or pos + 1
      if examine(id, score, true) then stop = true; break end
    end
    if stop then break end
  end
  if not done and (pos < 0 or pos >= size) then done = true end
end

if ARGV[10] ~= '' then walk_index() else walk_state() end
out[1], out[2], out[3], out[4] = examined, done and '1' or '', last_score, last_id
return out
