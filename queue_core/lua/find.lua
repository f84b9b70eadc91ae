--@include base, state
--[[
  find: where one message of a partition is, in every group at once, or where it was last seen in
  the partition's event stream. Read only. Backs DelayQueue.find().

  KEYS: the partition's keys, then one block of group keys per group of the layout.
  ARGV[1] 'where': ARGV[2] id
    Returns {'1' when the partition holds the message's record else '', then per group (in KEYS
    order) its state or '' and its score or NO_TIME}; O(groups).
  ARGV[1] 'seen': ARGV[2] id   ARGV[3] where to start reading back ('+': the newest entry, else an
    entry id: the walk continues below it)   ARGV[4] time budget in microseconds (<= 50000)
    ARGV[5] entries to read at most (<= 20000; the bound that always holds: Valkey answers TIME
    inside a script with the script's start time, so the time budget stops a call only where the
    clock moves)
    Walks the stream from newest to oldest in chunks of 100 entries until the quota or the budget is
    spent, the message's 'published' entry is found (nothing older can name it) or the stream begins.
    Returns {the next start (an entry id; '' when the walk is over), entries read, then 4 values per
    entry naming the message, newest first: event kind, group ('' for published), Redis time
    (ms), actor}.
]]
local id = ARGV[2]
if ARGV[1] == 'where' then
  local out = {redis.call('HEXISTS', P.msgs, id) == 1 and '1' or ''}
  for i = 1, NGROUPS do
    local state, score = state_of(group_keys(i), id)
    out[#out + 1] = state or ''
    out[#out + 1] = score or NO_TIME
  end
  return out
end

local budget = math.min(tonumber(ARGV[4]), 50000)
local max_entries = math.min(tonumber(ARGV[5]), 20000)
local function clock_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local started = clock_us()
local needle = ',' .. id .. ','
local out = {'', 0}
local start, read = ARGV[3], 0
while true do
  local entries = redis.call('XREVRANGE', P.events, start, '-', 'COUNT', 100)
  if #entries == 0 then return out end
  local finished = false
  for _, entry in ipairs(entries) do
    read = read + 1
    local f, fields = {}, entry[2]
    for i = 1, #fields, 2 do f[fields[i]] = fields[i + 1] end
    if f.ids and string.find(',' .. f.ids .. ',', needle, 1, true) then
      out[#out + 1] = f.e or ''; out[#out + 1] = f.g or ''; out[#out + 1] = f.ts or ''
      out[#out + 1] = f.actor or ''
      if f.e == 'published' then finished = true end
    end
  end
  out[2] = read
  if finished or #entries < 100 then return out end
  start = '(' .. entries[#entries][1]
  if read >= max_entries or clock_us() - started >= budget then
    out[1] = start
    return out
  end
end
