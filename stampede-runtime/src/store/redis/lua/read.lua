-- read(value, lease, fence; mode, lease_ttl_ms, fence_keep_ms)
--   -> {server now ms, envelope or nil, fence, 'none' | 'granted' | 'held', lease ms left}
-- mode: 'none' (just read), 'miss' (lease only if nothing servable), 'refresh' (lease anyway).
local now = now_ms()
local envelope = get_string(KEYS[1])
local head = header(envelope)
-- A lease-less load publishes under this fence: with no counter there is nothing an
-- invalidation could raise past it, so one is created (above every earlier fence).
local fence = get_counter(KEYS[3]) or raise_fence(now, head and head.fence, ARGV[3])
local mode = ARGV[1]
if mode == 'none' or (mode == 'miss' and head ~= nil and now < head.stale_until) then
  return { now, envelope or false, fence, 'none', 0 }
end
-- A live lease (ours in form, with a TTL) means another replica is loading.
local holder = get_counter(KEYS[2])
local left = redis.call('PTTL', KEYS[2])
if holder ~= nil and left > 0 then
  return { now, envelope or false, fence, 'held', left }
end
local taken = raise_fence(now, head and head.fence, ARGV[3])
redis.call('SET', KEYS[2], digits(taken), 'PX', ARGV[2])
return { now, envelope or false, taken, 'granted', 0 }
