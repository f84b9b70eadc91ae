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

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
