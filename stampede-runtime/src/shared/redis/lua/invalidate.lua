-- invalidate(value, lease, fence; channel, replica, version or '')
--   -> the new fence; -1 when the version arrived late (the mark still rises to it, and
--      copies older than the current fence are told to go); -2 when memory is full and a
--      late version's mark could not be written: nothing changed and nobody was told, so
--      the caller queues the invalidation to send again. (A plain invalidation deletes
--      first, and Redis lets a script write once one of its writes went through, a DEL
--      included: its fence is always raised.)
-- Raising the fence refuses every publish of a load that started before; deleting the
-- lease lets the next reader load at once instead of waiting for the fenced-out owner.
-- The fence key records the fence it raised as the last invalidation's, for a
-- write-through that began before it (see publish).
local now = now_ms()
local head = header(get_string(KEYS[1]))
local version = version_or_nil(ARGV[3])
local kept = get_fence() or {}
local current, mark = kept.fence, kept.mark
if version ~= nil then
  -- Strictly below the mark: a retry whose first attempt ran finds the mark at its own
  -- version, and applying that version again is harmless.
  if mark ~= nil and version_above(mark, version) then return -1 end
  if head ~= nil and head.version ~= nil and not version_above(version, head.version) then
    -- Late for the stored value, yet the newest version this key has heard of: a load
    -- still in flight from an older source must not be stored after it. (A lost fence
    -- is made anew, which also fences out the loads in flight.)
    local fence = current or now * 1024
    if not write_fence(fence, version, kept.recompute, FENCE_KEEP_MS, kept.invalidated, kept.before) then
      return -2
    end
    -- Still announced under the current fence: a replica's memory may hold a copy from an
    -- older fence, of an older version (its value evicted here, then loaded anew by
    -- another replica, whose publish only made that copy stale). The copy at this fence
    -- holds the stored value, as new as the version, and stays.
    notice(ARGV[1], 'i', fence, ARGV[2])
    return -1
  end
end
-- Delete first: with memory full a write is refused, a DEL never is.
redis.call('DEL', KEYS[1], KEYS[2])
local fence = raise_fence(now, head and head.fence, FENCE_KEEP_MS, version, true)
notice(ARGV[1], 'i', fence or 0, ARGV[2])
if fence == nil then return -2 end
return fence
