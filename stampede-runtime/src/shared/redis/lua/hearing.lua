-- hearing(registry; op, ...): the replicas whose hearing leases may still run, in one hash,
-- a field per replica id whose value is when its lease ends at the latest, in server
-- milliseconds. An acknowledged write waits for each replica listed here, or until its
-- lease has run out: a replica serves its memory copies only within its lease, which never
-- outlasts its entry (the entry runs from the server's clock when the renewal arrived,
-- the lease from the replica's when it sent it).
--
-- renew(op='renew', replica, lease ms, channel, message) -> 1 once the replica's entry runs
--   to now + lease and `message` went out on `channel` (the replica's own: it comes back
--   after every notice published before it, and renews the lease); 0 when memory is full
--   and the entry could not be written: nothing is sent, the lease is not renewed. Entries
--   that ended four leases ago are reaped on the way (kept that long for the lists' grace).
-- list(op='list', grace ms) -> { now ms, since ms or -1, replica, until ms, ... }: the
--   entries that have not ended, or ended within the grace (a server clock stepped ahead
--   ends them early by the step, and the lease they stand for still runs), and when the
--   registry began ('@since', written with its first entry): one younger than a lease may
--   be missing a replica that renewed into the registry it replaces (Redis restarted
--   without its data, the key deleted or evicted), so the caller waits out every lease.
--
-- A key of another type at the registry is overwritten by a renewal and answered as an
-- error by a list (which then waits out the lease for everyone). Any other refusal (an
-- ACL without the hash commands) is an error too, so the replica falls back.
local op = ARGV[1]
local now = now_ms()

local function refused(reply)
  return type(reply) == 'table' and reply.err ~= nil
end

local function fail(reply)
  return redis.error_reply('ERR stampede hearing: ' .. reply.err)
end

local all = redis.pcall('HGETALL', KEYS[1])
if op == 'list' then
  if refused(all) then return fail(all) end
  local reply = { now, -1 }
  local since = now - (tonumber(ARGV[2]) or 0)
  for i = 1, #all, 2 do
    local ends = exact(all[i + 1])
    if all[i] == '@since' then
      if ends ~= nil then reply[2] = ends end
    elseif ends ~= nil and ends > since then
      table.insert(reply, all[i])
      table.insert(reply, ends)
    end
  end
  return reply
end
if op ~= 'renew' then return redis.error_reply('ERR unknown hearing operation') end

local replica, lease = ARGV[2], tonumber(ARGV[3])
if refused(all) then
  if string.sub(all.err, 1, 9) ~= 'WRONGTYPE' then return fail(all) end
  redis.call('DEL', KEYS[1])
  all = {}
end
local began = false
for i = 1, #all, 2 do
  local ends = exact(all[i + 1])
  if all[i] == '@since' then
    began = ends ~= nil
  elseif all[i] ~= replica and (ends == nil or ends <= now - 4 * lease) then
    redis.call('HDEL', KEYS[1], all[i])
  end
end
-- Written over the old entry, which stays if the write is refused. With memory full a
-- script may write once one of its writes went through: the entry is then deleted and
-- written again in one step (nobody sees it missing), the delete being that write.
local ends = digits(now + lease)
local written = redis.pcall('HSET', KEYS[1], replica, ends)
if refused(written) and string.sub(written.err, 1, 3) == 'OOM' then
  redis.call('HDEL', KEYS[1], replica)
  written = redis.pcall('HSET', KEYS[1], replica, ends)
  if refused(written) and string.sub(written.err, 1, 3) == 'OOM' then return 0 end
end
if refused(written) then return fail(written) end
if not began then redis.call('HSET', KEYS[1], '@since', digits(now)) end
-- Never shorter than it was: another replica's lease may be longer.
local keep = lease * 4
local left = redis.pcall('PTTL', KEYS[1])
if type(left) == 'number' and left > keep then keep = left end
redis.pcall('PEXPIRE', KEYS[1], keep)
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 1
