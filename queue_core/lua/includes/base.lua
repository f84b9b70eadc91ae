--[[
  The keys of the call and the server clock.
    P   the partition's keys (shared by its groups), from KEYS in PartitionKeys order: the
        header (scripts.header) builds it, NPK of them, only those the script touches
    G   the first group's keys, from the KEYS that follow (GroupKeys order); group_keys(i), also
        from the header, gives the i-th group block of NGK keys (publish gets one per group)
]]
local NGROUPS = (#KEYS - NPK) / NGK
local G = group_keys(1)

-- Keeps a hot hash in the hashtable encoding (see HASHTABLE_FIELD in keys.py): O(1) per field.
local function hashtable(key)
  redis.call('HSETNX', key, HASHTABLE_FIELD, HASHTABLE_VALUE)
end

-- ZADD of the score/member pairs in z. A sorted set of up to 128 short members is a listpack,
-- where every insert scans the whole set: a claim's 100 ids added to an empty set cost Redis 7.0
-- ~300 us, to a skiplist ~25 (bench/RESULTS.md). For a batch of 32 or more, a member longer than
-- the default zset-max-listpack-value (64; this one is ~290 bytes) goes first: Redis makes a new
-- key a skiplist (it looks at the first member) or converts a listpack at once, and removes,
-- pops and renames keep a skiplist (a RESTORE, a restart's load or a replica's resync may bring
-- back a listpack: the next batch converts it again). The member is removed in the same call, so
-- nobody reads it. The price is memory: a skiplist of 100 takes ~12 KB against ~4 KB, and stays
-- one while the set lives (docs/design.md). Below 32 members the listpack costs little.
local function zadd_many(key, z)
  if #z < 64 then   -- score/member pairs: 32 members
    redis.call('ZADD', key, unpack(z))
    return
  end
  redis.call('ZADD', key, 'inf', HASHTABLE_VALUE, unpack(z))
  redis.call('ZREM', key, HASHTABLE_VALUE)
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
