-- Shared by every script (prepended). Keys: KEYS[1] the value, KEYS[2] the lease, KEYS[3]
-- the fence (with the source-version mark once one was set): one hash tag, one slot.
--
-- Anything found at our keys may be missing, of another type, malformed or without a TTL
-- (an operator, an old build, a bug, an eviction). None of that may fail a script or wedge
-- a key: it is read as absent and overwritten, and where it guarded something it fails
-- closed (no fence refuses every publish).
--
-- Writes go through pcall: with memory full (`noeviction`) Redis refuses a SET but never a
-- DEL or a PUBLISH, so a script deletes first and still announces what it did.

-- Lua numbers are doubles: integers are exact only below 2^53.
local EXACT = 9007199254740992
-- How long a fence outlives its last raise, and a mark its last invalidation. A lost fence
-- is safe (it restarts above every earlier one); a lost mark forgets a late invalidation.
local FENCE_KEEP_MS = 3600000
local MARK_KEEP_MS = 86400000

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The string at key; nil when missing or of another type (pcall: no WRONGTYPE error).
local function get_string(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'string' then return v end
  return nil
end

-- Whether a write went through (pcall returns an error table when Redis refused it).
local function wrote(reply)
  return type(reply) ~= 'table' or reply.err == nil
end

-- Decimal digits below 2^53, else nil.
local function exact(text)
  if text == nil or #text == 0 or #text > 16 or not string.match(text, '^%d+$') then
    return nil
  end
  local n = tonumber(text)
  if n >= EXACT then return nil end
  return n
end

local function digits(n)
  return string.format('%.0f', n)
end

-- A source version: 20 decimal digits (see the envelope), else nil.
local function version_or_nil(v)
  if v ~= nil and #v == 20 and string.match(v, '^%d+$') then return v end
  return nil
end

-- a > b for two 20-digit versions, exact: each 10-digit half fits a double.
local function version_above(a, b)
  local ah, bh = tonumber(string.sub(a, 1, 10)), tonumber(string.sub(b, 1, 10))
  if ah ~= bh then return ah > bh end
  return tonumber(string.sub(a, 11, 20)) > tonumber(string.sub(b, 11, 20))
end

local function u64_at(s, at)
  local n = 0
  for i = at, at + 7 do n = n * 256 + string.byte(s, i) end
  return n
end

-- The fields of a stored envelope the scripts decide on, or nil if it is not one of ours.
-- Offsets are the envelope layout's plus one (Lua strings start at 1). A fence a double
-- cannot hold was never written by us: it is ignored.
local function header(envelope)
  if envelope == nil or #envelope < 82 or string.sub(envelope, 1, 5) ~= 'STPD\3' then
    return nil
  end
  local version = nil
  if string.byte(envelope, 54) % 2 == 1 then version = version_or_nil(string.sub(envelope, 55, 74)) end
  local fence = u64_at(envelope, 46)
  if fence >= EXACT then fence = nil end
  return {
    fresh_until = u64_at(envelope, 6),
    stale_until = u64_at(envelope, 14),
    keep_until = u64_at(envelope, 22),
    fence = fence,
    version = version,
  }
end

-- Whether an envelope's deadlines are ones we wrote: in order, and none past the end of
-- the key's TTL (the publish sets PX = keep_until - now), give or take clock estimates.
local function plausible(head, now, ttl)
  return head.fresh_until <= head.stale_until
    and head.stale_until <= head.keep_until
    and head.keep_until <= now + ttl + 1000
end

-- The fence key: "<fence>", then "m<20-digit mark>" once an invalidation named a source
-- version, "r<ms>", the key's last recompute time (for the replicas that wait on a
-- lease, once the value that carried it has expired), "i<fence>", the fence the last
-- invalidation raised it to, and "b<fence>", the one the invalidation before it raised it
-- to (a write-through that began before an invalidation other than its own is refused:
-- when its own is the last, the one before tells).
-- Its fields, or nil if not ours.
local function get_fence()
  local v = get_string(KEYS[3])
  if v == nil then return nil end
  local fence = exact(string.match(v, '^(%d+)'))
  if fence == nil then return nil end
  return {
    fence = fence,
    mark = version_or_nil(string.match(v, ' m(%d+)')),
    recompute = exact(string.match(v, ' r(%d+)')),
    invalidated = exact(string.match(v, ' i(%d+)')),
    before = exact(string.match(v, ' b(%d+)')),
  }
end

local function write_fence(fence, mark, recompute, keep_ms, invalidated, before)
  local value, keep = digits(fence), keep_ms
  if mark ~= nil then value, keep = value .. ' m' .. mark, math.max(keep_ms, MARK_KEEP_MS) end
  if recompute ~= nil then value = value .. ' r' .. digits(recompute) end
  if invalidated ~= nil then value = value .. ' i' .. digits(invalidated) end
  if before ~= nil then value = value .. ' b' .. digits(before) end
  return wrote(redis.pcall('SET', KEYS[3], value, 'PX', keep))
end

-- Raises the fence, keeping its mark (or setting `mark`), and records it as the last
-- invalidation's when `invalidation`; nil if it could not be written.
-- A fence is never below the server's clock × 1024: a key is raised fewer than 1024 times
-- a millisecond, so a fence is never handed out twice even when the counter goes back (a
-- lost fence: expired, evicted, flushed, never set, not ours; a restart from a snapshot;
-- a failover to a replica that lagged), given clocks that do not go back by more than the
-- time a restart or failover takes. It also starts above the stored value's fence, so a
-- publish from before a loss never meets an equal fence again. now × 1024 stays below
-- 2^53 until the year 2248.
local function raise_fence(now, stored_fence, keep_ms, mark, invalidation)
  local kept = get_fence() or {}
  local current = kept.fence or now * 1024
  if stored_fence ~= nil and stored_fence > current then current = stored_fence end
  if current < now * 1024 then current = now * 1024 end
  if current + 1 >= EXACT then current = now * 1024 end
  local fence = current + 1
  local invalidated, before = kept.invalidated, kept.before
  if invalidation then invalidated, before = fence, kept.invalidated end
  if not write_fence(fence, mark or kept.mark, kept.recompute, keep_ms, invalidated, before) then
    return nil
  end
  return fence
end

-- The lease: "<fence> <token> <granted ms> <alive ms> [<recompute ms>] [w]", the token its
-- replica's. `alive` is the holder's last sign of life: it beats while its load runs.
-- `w`: another replica's miss found it held and waits for its publish.
local function get_lease()
  local v = get_string(KEYS[2])
  if v == nil then return nil end
  local fence, token, granted, alive = string.match(v, '^(%d+) (%x+) (%d+) (%d+)')
  fence, granted, alive = exact(fence), exact(granted), exact(alive)
  if fence == nil or granted == nil or alive == nil then return nil end
  return {
    fence = fence,
    token = token,
    granted = granted,
    alive = alive,
    recompute = exact(string.match(v, '^%d+ %x+ %d+ %d+ (%d+)')),
    -- A replica's miss found it held and waits for its publish.
    waited = string.find(v, ' w$') ~= nil,
  }
end

local function lease_value(fence, token, granted, alive, recompute, waited)
  local v = digits(fence) .. ' ' .. token .. ' ' .. digits(granted) .. ' ' .. digits(alive)
  if recompute ~= nil and recompute >= 0 then v = v .. ' ' .. digits(recompute) end
  if waited then v = v .. ' w' end
  return v
end

-- The server's run id: a restart, or a failover to another node, changes it. A snapshot
-- or a lagging replica may bring back the very fence a load read before the restart, so
-- a publish whose read saw another run id is refused. '' where this user may not run
-- INFO (least-privilege ACL users and managed services often cannot): then the fence
-- alone decides, which the clock floor above keeps unique.
local function incarnation()
  local info = redis.pcall('INFO', 'server')
  if type(info) ~= 'string' then return '' end
  return string.match(info, 'run_id:(%x+)') or ''
end

local function notice(channel, kind, fence, replica)
  redis.call('PUBLISH', channel, kind .. ' ' .. digits(fence) .. ' ' .. replica .. ' ' .. KEYS[1])
end
