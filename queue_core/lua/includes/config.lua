--@include base
-- The topic's and a group's configuration hashes, with the defaults from the header.

local T_NUMERIC = {'max_payload_bytes', 'events_maxlen', 'max_delay_ms', 'history_max'}
local G_NUMERIC = {'visibility_timeout_ms', 'retry_base_ms', 'retry_factor', 'retry_max_delay_ms', 'retry_jitter',
  'max_attempts', 'dead_max_count', 'dead_max_age_ms', 'ttl_ms', 'rate_n', 'rate_ms', 'mif', 'key_rate_n',
  'key_rate_ms', 'mif_key'}

local function load_hash(key, defaults, numeric)
  local cfg = {}
  for k, v in pairs(defaults) do cfg[k] = v end
  local raw = redis.call('HGETALL', key)
  for i = 1, #raw, 2 do cfg[raw[i]] = raw[i + 1] end
  for _, name in ipairs(numeric) do cfg[name] = tonumber(cfg[name]) end
  return cfg
end

local function load_topic() return load_hash(P.config, TOPIC_DEFAULTS, T_NUMERIC) end
local function load_group(gk) return load_hash((gk or G).config, GROUP_DEFAULTS, G_NUMERIC) end
