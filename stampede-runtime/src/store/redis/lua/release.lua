-- release(value, lease, fence, mark; fence, channel, node) -> 1 if released, else 0
-- Only the owner's fence releases the lease (a plain DEL would free someone else's).
if get_counter(KEYS[2]) ~= tonumber(ARGV[1]) then return 0 end
redis.call('DEL', KEYS[2])
notice(ARGV[2], 'r', tonumber(ARGV[1]), ARGV[3])
return 1
