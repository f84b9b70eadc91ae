--@include index
--[[
  sweep_index: drop the index log's entries of messages that are gone, a bounded step a call (the
  removals do this by themselves once as many messages have gone as are left: includes/index.lua).
  Backs DelayQueue.sweep_index(): give the memory back now.

  KEYS: the partition's keys.
  ARGV[1] entries to check at most in this call (<= 5000: ~15 ms of Redis on the 2-core test machine)
  ARGV[2] '1': start a sweep of the whole log unless one is under way
  Returns {CODE.OK, '1' while a sweep is under way (call again), else '', '1' when this call
  started it or there is no log (else it went on with one the removals had begun)}.
]]
local started = ''
if ARGV[2] == '1' then
  if redis.call('EXISTS', P.ixs) == 0 then return {CODE.OK, '', '1'} end
  if not redis.call('HGET', P.ixs, 'ls') then started = '1' end
  index_sweep_start()
end
index_sweep(math.min(tonumber(ARGV[1]) or 500, 5000))
return {CODE.OK, redis.call('HGET', P.ixs, 'ls') and '1' or '', started}
