-- publish(value, lease, fence, mark; fence, envelope, keep_until_ms, version or '', channel, node)
--   -> 'stored' | 'fence' | 'version' | 'expired'
-- Check first, write next, publish last: a script that fails halfway keeps its writes.
local now = now_ms()
local fence = tonumber(ARGV[1])
-- A newer lease or an invalidation since this load started: its value may be older.
if (get_counter(KEYS[3]) or 0) ~= fence then return 'fence' end
local owner = get_counter(KEYS[2]) == fence
local mark = version_or_nil(get_string(KEYS[4]))
local version = version_or_nil(ARGV[4])
-- Read from a source older than an invalidation already seen: do not put it back.
if mark ~= nil and version ~= nil and version_above(mark, version) then
  if owner then
    redis.call('DEL', KEYS[2])
    notice(ARGV[5], 'r', fence, ARGV[6])
  end
  return 'version'
end
local ttl = tonumber(ARGV[3]) - now
if ttl <= 0 then
  if owner then
    redis.call('DEL', KEYS[2])
    notice(ARGV[5], 'r', fence, ARGV[6])
  end
  return 'expired'
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ttl)
if owner then redis.call('DEL', KEYS[2]) end
notice(ARGV[5], 'p', fence, ARGV[6])
return 'stored'
