--[[
  The keys of the call and the server clock.
    P   the partition's keys (shared by its groups), from KEYS in PartitionKeys order
    G   the first group's keys, from the KEYS that follow (GroupKeys order); group_keys(i) gives
        the i-th group block (publish gets one block per group)
]]
local P = {}
for i, name in ipairs(PK_NAMES) do P[name] = KEYS[i] end
local function group_keys(index)
  local g, base = {}, #PK_NAMES + (index - 1) * #GK_NAMES
  for j, name in ipairs(GK_NAMES) do g[name] = KEYS[base + j] end
  return g
end
local NGROUPS = (#KEYS - #PK_NAMES) / #GK_NAMES
local G = group_keys(1)

-- Keeps a hot hash in the hashtable encoding (see HASHTABLE_FIELD in keys.py): O(1) per field.
local function hashtable(key)
  redis.call('HSETNX', key, HASHTABLE_FIELD, HASHTABLE_VALUE)
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
