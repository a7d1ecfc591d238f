-- invalidate(value, lease, fence; channel, replica, version or '')
--   -> the new fence; -1 when the version arrived late for the stored value (which stays:
--      the mark and the fence still rise, and the new fence is announced); -2 when memory
--      is full and a late version's fence could not be raised: nothing changed and nobody
--      was told, so the caller queues the invalidation to send again. (A plain
--      invalidation deletes first, and Redis lets a script write once one of its writes
--      went through, a DEL included: its fence is always raised.)
-- Raising the fence refuses every publish of a load that started before; deleting the
-- lease lets the next reader load at once instead of waiting for the fenced-out owner.
-- The fence key records the fence it raised as the last invalidation's, for a
-- write-through that began before it (see publish).
local now = now_ms()
local head = header(get_string(KEYS[1]))
local version = version_or_nil(ARGV[3])
local kept = get_fence() or {}
local mark = kept.mark
if version ~= nil then
  -- Strictly below the mark: a retry whose first attempt ran finds the mark at its own
  -- version, and applying that version again is harmless.
  if mark ~= nil and version_above(mark, version) then return -1 end
  if head ~= nil and head.version ~= nil and not version_above(version, head.version) then
    -- Late for the stored value, which stays: another replica loaded the change before
    -- it was announced. Everything else that was read before it goes, as after any
    -- invalidation: the fence rises, so no load still in flight stores, and the new
    -- fence is announced, so every copy in a replica's memory goes. A copy may be older
    -- than the stored value under the current fence too (lease-less loads share one),
    -- or under an older one (its value evicted here, then loaded anew by another
    -- replica, whose publish only made that copy stale).
    local fence = raise_fence(now, head.fence, FENCE_KEEP_MS, version, true)
    if fence == nil then return -2 end
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
