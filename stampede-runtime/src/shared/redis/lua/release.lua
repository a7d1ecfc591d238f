-- release(value, lease, fence; token, channel, replica) -> 1 if released, else 0
-- Only the holder's token releases the lease (a plain DEL would free someone else's).
-- The token is the replica's own, so a lease whose grant it never heard of (a lost reply)
-- is released as surely as one it knows.
local lease = get_lease()
if lease == nil or lease.token ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[2])
notice(ARGV[2], 'r', lease.fence, ARGV[3])
return 1
