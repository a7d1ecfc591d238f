-- read(value, lease, fence; mode, lease_ttl_ms, token, quiet_after_ms, held_after_ms,
--      recompute_ms)
--   -> {server now ms, envelope or false, fence, lease, lease ms left, lease held for ms,
--       holder silent for ms, holder's recompute ms or -1, what was repaired, run id}
-- mode: 'none' (just read), 'miss' (the lease only if nothing servable is stored),
-- 'refresh' (the lease whatever is stored), 'force' (the lease even from a live holder: a
-- forced refresh fences out every load that started before it).
-- lease: 'none', 'granted' (to this token: a read resent after a lost reply gets its own
-- lease back), 'taken over' (granted, from another holder) or 'held <token>' (by another
-- replica, whose token that is).
-- A holder is taken over when it has been silent (no beat) for quiet_after_ms (lost,
-- stalled, dead), or has held the lease for held_after_ms (longer than this replica's own
-- lease, or than the stale window allows); -1: never. recompute_ms (-1: unknown) is
-- recorded in a granted lease for the replicas that will wait on it (else the key's last
-- one, which the publish keeps in the fence key).
local now = now_ms()
local envelope = get_string(KEYS[1])
local repaired = ''
if envelope ~= nil then
  local ttl = redis.call('PTTL', KEYS[1])
  local head = header(envelope)
  if ttl < 0 then
    envelope, repaired = nil, 'value without a TTL'
  elseif head ~= nil and not plausible(head, now, ttl) then
    envelope, repaired = nil, 'deadlines past the TTL'
  end
end
local head = header(envelope)
local stored_fence = head and head.fence
local fence_keep = math.max(FENCE_KEEP_MS, tonumber(ARGV[2]))
local kept = get_fence()
local fence, last_recompute = kept and kept.fence, kept and kept.recompute
if fence == nil then
  if redis.call('EXISTS', KEYS[3]) == 1 then repaired = 'fence not ours' end
  -- A lease-less load publishes under this fence: without one there would be nothing an
  -- invalidation could raise past it. 0 when it cannot be written: every publish refused.
  fence = raise_fence(now, stored_fence, fence_keep) or 0
end
local mode = ARGV[1]
if mode == 'none' or (mode == 'miss' and head ~= nil and now < head.stale_until) then
  return { now, envelope or false, fence, 'none', 0, 0, 0, -1, repaired, incarnation() }
end
local token = ARGV[3]
local lease = get_lease()
local granted = 'granted'
if lease ~= nil then
  local left = redis.call('PTTL', KEYS[2])
  if left > 0 then
    local held_for = math.max(now - lease.granted, 0)
    local silent_for = math.max(now - lease.alive, 0)
    local recompute = lease.recompute or last_recompute or -1
    if lease.token == token then
      return { now, envelope or false, lease.fence, 'granted', left, held_for, silent_for, recompute, repaired, incarnation() }
    end
    local quiet_after, held_after = tonumber(ARGV[4]), tonumber(ARGV[5])
    local quiet = quiet_after >= 0 and silent_for >= quiet_after
    local overdue = held_after >= 0 and held_for >= held_after
    if mode ~= 'force' and not quiet and not overdue then
      -- A miss waits for the holder's publish: marked, the publish brings the value along.
      if mode == 'miss' and not lease.waited then
        local marked = lease_value(lease.fence, lease.token, lease.granted, lease.alive,
          lease.recompute, true)
        redis.pcall('SET', KEYS[2], marked, 'KEEPTTL')
      end
      return { now, envelope or false, fence, 'held ' .. lease.token, left, held_for, silent_for, recompute, repaired, incarnation() }
    end
    granted = 'taken over'
  end
end
local taken = raise_fence(now, stored_fence, fence_keep)
if taken == nil then
  -- Memory full: no lease and no new fence. The load goes on without a lease.
  return { now, envelope or false, fence, 'none', 0, 0, 0, -1, 'memory full', incarnation() }
end
local recompute = tonumber(ARGV[6])
if recompute < 0 then recompute = last_recompute or -1 end
-- Taken over, the lease keeps its mark: the replicas that waited on it still do.
local waited = granted == 'taken over' and lease.waited
local recorded = lease_value(taken, token, now, now, recompute, waited)
if not wrote(redis.pcall('SET', KEYS[2], recorded, 'PX', ARGV[2])) then
  return { now, envelope or false, taken, 'none', 0, 0, 0, -1, 'memory full', incarnation() }
end
return { now, envelope or false, taken, granted, tonumber(ARGV[2]), 0, 0, recompute, repaired, incarnation() }
