-- beat(value, lease, fence; token) -> 1 while the lease is still this token's, else 0
-- A holder's sign of life while its load runs: replicas waiting on the lease take it over
-- from a holder gone silent, not from one that is slow.
local lease = get_lease()
if lease == nil or lease.token ~= ARGV[1] then return 0 end
local alive = lease_value(lease.fence, lease.token, lease.granted, now_ms(), lease.recompute,
  lease.waited)
if not wrote(redis.pcall('SET', KEYS[2], alive, 'KEEPTTL')) then return 0 end
return 1
