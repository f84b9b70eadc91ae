--@include
--[[
  layout: change a topic's layout in one partition: add or remove a group, or set the partition
  count. Partition 0 is changed first and is the source of truth; the client copies the result to
  the other partitions. Backs DelayQueue.configure_group(), delete_group() and configure_topic().

  KEYS: the partition's keys (group keys are not needed).
  ARGV[1] op: 'add' | 'remove' | 'set' (ARGV[2] = the whole layout) | 'partitions' (ARGV[2] = count)
  ARGV[2] group name, layout or count

  Returns the layout after the change ("<partitions>|<g1,g2,...>").
]]
local layout = redis.call('HGET', P.config, 'layout') or '1|default'
local parts, groups = string.match(layout, '^(%d+)|(.*)$')
local list = {}
for g in string.gmatch(groups, '[^,]+') do list[#list + 1] = g end
local op, arg = ARGV[1], ARGV[2]
if op == 'set' then
  redis.call('HSET', P.config, 'layout', arg)
  return arg
elseif op == 'partitions' then
  parts = arg
elseif op == 'add' then
  local found = false
  for _, g in ipairs(list) do if g == arg then found = true end end
  if not found then list[#list + 1] = arg end
elseif op == 'remove' then
  local keep = {}
  for _, g in ipairs(list) do if g ~= arg then keep[#keep + 1] = g end end
  list = keep
end
layout = parts .. '|' .. table.concat(list, ',')
redis.call('HSET', P.config, 'layout', layout)
return layout
