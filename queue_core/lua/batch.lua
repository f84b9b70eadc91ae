--@include base, batch, config
--[[
  batch: seals a batch (the end of q.batch()'s `with` block, or Batch.seal()): from now on it
  completes when its last member ends, and the callbacks whose rule already holds (every member
  ended before the seal, or an empty batch) fire in this call (includes/batch.lua).

  KEYS: the partition's keys, then one block of group keys per group, in the layout's order.
  ARGV[1] layout the caller built the key blocks from (a stale one is refused)   ARGV[2] batch id

  Each seal also trims up to 16 batches of the partition opened more than 7 days ago that are over
  (includes/batch.lua batch_trim), so finished batches' records do not pile up.

  Returns {CODE.OK, callbacks waiting to be forwarded in the partition[, the mark of the entries
  this seal fired (includes/batch.lua batch_mark)]}, {CODE.NOT_FOUND} (no
  such batch), {CODE.STATE_CONFLICT, sealed ms} (sealed already) or {CODE.STALE_LAYOUT, layout}.
]]
local tcfg = load_topic()
local layout = tcfg.layout or ('1|' .. 'default')
if layout ~= ARGV[1] then return {CODE.STALE_LAYOUT, layout} end
local bid, ts = ARGV[2], now_ms()
if redis.call('HEXISTS', P.batches, bid .. '|cb') == 0 then return {CODE.NOT_FOUND} end
local sealed = redis.call('HGET', P.batches, bid .. '|s')
if sealed then return {CODE.STATE_CONFLICT, tonumber(sealed)} end
redis.call('HSET', P.batches, bid .. '|s', ts)
local names = {}
for name in string.gmatch(string.match(layout, '^[^|]*|(.*)$') or '', '[^,]+') do
  names[#names + 1] = name
  batch_check(group_keys(#names), name, bid, ts)
end
batch_trim(names, ts, 16)
return batch_mark({CODE.OK, redis.call('ZCARD', P.batch_outbox)})   -- the entries this seal fired
