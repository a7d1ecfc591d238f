-- publish(value, lease, fence, mark; fence, envelope, keep_until_ms, version or '', channel, node)
--   -> {'stored' | 'fence' | 'version' | 'expired', notices sent}
-- Check first, write next, publish last: a script that fails halfway keeps its writes.
local now = now_ms()
local fence = tonumber(ARGV[1])
-- A newer lease or an invalidation since this load started: its value may be older. A
-- lost counter may have hidden either, so no counter refuses every fence.
if get_counter(KEYS[3]) ~= fence then return { 'fence', 0 } end
local owner = get_counter(KEYS[2]) == fence
-- Gives the lease up without a value: its waiters may take it at once.
local function give_up(outcome)
  if not owner then return { outcome, 0 } end
  redis.call('DEL', KEYS[2])
  notice(ARGV[5], 'r', fence, ARGV[6])
  return { outcome, 1 }
end
local mark = version_or_nil(get_string(KEYS[4]))
local version = version_or_nil(ARGV[4])
-- Read from a source older than an invalidation already seen: do not put it back.
if mark ~= nil and version ~= nil and version_above(mark, version) then
  return give_up('version')
end
-- Nor over a value read from a newer source (two lease-less loads share one fence).
local head = header(get_string(KEYS[1]))
if version ~= nil and head ~= nil and head.version ~= nil and version_above(head.version, version) then
  return give_up('version')
end
local ttl = tonumber(ARGV[3]) - now
if ttl <= 0 then return give_up('expired') end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ttl)
if owner then redis.call('DEL', KEYS[2]) end
notice(ARGV[5], 'p', fence, ARGV[6])
return { 'stored', 1 }
