-- invalidate(value, lease, fence, mark; channel, node, fence_keep_ms, version or '', mark_keep_ms)
--   -> the new fence, or -1 when the version arrived late (the mark still rises to it)
-- Raising the fence refuses every publish of a load that started before; deleting the
-- lease lets the next reader load at once instead of waiting for the fenced-out owner.
local now = now_ms()
local head = header(get_string(KEYS[1]))
local version = version_or_nil(ARGV[4])
if version ~= nil then
  local mark = version_or_nil(get_string(KEYS[4]))
  -- Strictly below the mark: a retry whose first attempt ran finds the mark at its own
  -- version, and applying that version again is harmless.
  if mark ~= nil and version_above(mark, version) then return -1 end
  if head ~= nil and head.version ~= nil and not version_above(version, head.version) then
    -- Late for the stored value, yet the newest version this key has heard of: a load
    -- still in flight from an older source must not be stored after it.
    redis.call('SET', KEYS[4], version, 'PX', ARGV[5])
    return -1
  end
end
local fence = raise_fence(now, head and head.fence, ARGV[3])
if version ~= nil then redis.call('SET', KEYS[4], version, 'PX', ARGV[5]) end
redis.call('DEL', KEYS[1], KEYS[2])
notice(ARGV[1], 'i', fence, ARGV[2])
return fence
