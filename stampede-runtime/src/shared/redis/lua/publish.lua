-- publish(value, lease, fence; fence, envelope, keep_until_ms, version or '', channel, replica,
--         token or '', recompute_ms, run id of the read or '', largest envelope announced,
--         a write-through's own invalidation's fence or '', the fence its start stands at)
--   -> {'stored' | 'fence' | 'restarted' | 'version' | 'expired' | 'memory', notices sent}
-- Check first, write next, announce last: a script that fails halfway keeps its writes.
-- A refusal is announced too ('r'), so replicas waiting on this load read again at once
-- instead of waiting out a lease it no longer holds (an invalidation, a flush, a takeover).
local now = now_ms()
local fence = tonumber(ARGV[1])
local kept = get_fence() or {}
local current, mark = kept.fence, kept.mark
local lease = get_lease()
local owner = lease ~= nil and ARGV[7] ~= '' and lease.token == ARGV[7]
local function refuse(outcome)
  if owner then redis.call('DEL', KEYS[2]) end
  notice(ARGV[5], 'r', fence, ARGV[6])
  return { outcome, 1 }
end
-- A newer lease or an invalidation since this load started: its value may be older. A
-- lost fence may have hidden either, so no fence refuses every publish.
if current ~= fence then return refuse('fence') end
-- A write-through (an insert) is a write older than every invalidation that came after it
-- began, wherever that invalidation's first step got in: not stored after one. Its own
-- invalidation, which raised the fence as it began, does not count; when it is the last,
-- the one before it may still have come after the start (another insert that began later
-- and got its invalidation in first). Invalidations raise the fence in order, so one
-- older than that one is older than the start too.
if ARGV[11] ~= '' then
  -- Its own invalidation unknown here: the server lost its fences since (a restart
  -- without its data, an eviction), and with them any invalidation that came after the
  -- insert began.
  local own = tonumber(ARGV[11])
  if own ~= nil and (kept.invalidated == nil or kept.invalidated < own) then
    return refuse('fence')
  end
  local other = kept.invalidated
  if other ~= nil and other == own then other = kept.before end
  if other ~= nil and other >= tonumber(ARGV[12]) then return refuse('fence') end
end
-- Read before a restart (or on another node before a failover): its fence may be one the
-- server handed out again since a snapshot, so it proves nothing.
if ARGV[9] ~= '' and ARGV[9] ~= incarnation() then return refuse('restarted') end
local version = version_or_nil(ARGV[4])
-- Read from a source older than an invalidation already seen: do not put it back.
if mark ~= nil and version ~= nil and version_above(mark, version) then
  return refuse('version')
end
-- Nor over a value read from a newer source (two lease-less loads share one fence).
local head = header(get_string(KEYS[1]))
if version ~= nil and head ~= nil and head.version ~= nil and version_above(head.version, version) then
  return refuse('version')
end
local ttl = tonumber(ARGV[3]) - now
if ttl <= 0 then return refuse('expired') end
if not wrote(redis.pcall('SET', KEYS[1], ARGV[2], 'PX', ttl)) then return refuse('memory') end
if owner then redis.call('DEL', KEYS[2]) end
-- The recompute time outlives the value, for whoever waits on the next lease.
write_fence(fence, mark, tonumber(ARGV[8]), math.max(FENCE_KEEP_MS, ttl), kept.invalidated,
  kept.before)
-- A small envelope rides along ('v') when a replica waits on the lease: those waiting
-- answer without reading it again. Without a waiter the notice stays slim.
if owner and lease.waited and #ARGV[2] <= tonumber(ARGV[10]) then
  local head = 'v ' .. digits(fence) .. ' ' .. ARGV[6] .. ' ' .. #KEYS[1] .. ' '
  redis.call('PUBLISH', ARGV[5], head .. KEYS[1] .. ARGV[2])
else
  notice(ARGV[5], 'p', fence, ARGV[6])
end
return { 'stored', 1 }
