-- Shared by every script (prepended). Keys: KEYS[1] value, KEYS[2] lease, KEYS[3] fence,
-- KEYS[4] source-version mark: all under one hash tag, so one cluster slot.
--
-- Anything found at our keys may be missing, of another type, not a number or without a
-- TTL (an operator, an old build, a bug). None of that may fail a script or wedge a key:
-- such a value is treated as absent and overwritten.

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

-- Lua numbers are doubles: counters are ours only below 2^53, where they stay exact.
local function get_counter(key)
  local v = get_string(key)
  if v == nil or #v > 16 or not string.match(v, '^%d+$') then return nil end
  local n = tonumber(v)
  if n >= 9007199254740992 then return nil end
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
-- Offsets are the envelope layout's plus one (Lua strings start at 1).
local function header(envelope)
  if envelope == nil or #envelope < 82 or string.sub(envelope, 1, 5) ~= 'STPD\2' then
    return nil
  end
  local version = nil
  if string.byte(envelope, 54) == 1 then version = version_or_nil(string.sub(envelope, 55, 74)) end
  return { stale_until = u64_at(envelope, 14), fence = u64_at(envelope, 46), version = version }
end

-- The next fence. A lost counter (expired, flushed, never set, not ours) restarts at the
-- server's clock × 1024, above every fence handed out before it (fewer than 1024 per
-- millisecond), and above the stored value's: a publish from before the loss can never
-- meet an equal fence again. now × 1024 stays below 2^53 until the year 2248.
local function raise_fence(now, stored_fence, keep_ms)
  local current = get_counter(KEYS[3]) or now * 1024
  if stored_fence ~= nil and stored_fence > current then current = stored_fence end
  local fence = current + 1
  redis.call('SET', KEYS[3], digits(fence), 'PX', keep_ms)
  return fence
end

local function notice(channel, kind, fence, node)
  redis.call('PUBLISH', channel, kind .. ' ' .. digits(fence) .. ' ' .. node .. ' ' .. KEYS[1])
end
