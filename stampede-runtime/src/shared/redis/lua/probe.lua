-- probe(key; channel) -> {'<command>: <error>', ...}: each command the scripts use that
-- this user may not run (ACL) or that the server renamed away, tried once on a key of
-- stampede's own. Run once per replica at start, so a missing permission is named at
-- start-up instead of failing every load. `info` among them is not fatal: the scripts do
-- without it (see incarnation()); nor are the hash commands, which only a fleet-wide
-- admission's permits use (without them it takes each replica's local share).
local refused = {}
local function try(name, ...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply.err ~= nil then
    table.insert(refused, name .. ': ' .. reply.err)
  end
end
try('time', 'TIME')
try('get', 'GET', KEYS[1])
try('exists', 'EXISTS', KEYS[1])
try('set', 'SET', KEYS[1], 'probe', 'PX', 1000)
try('pttl', 'PTTL', KEYS[1])
try('del', 'DEL', KEYS[1])
try('publish', 'PUBLISH', ARGV[1], 'probe')
try('info', 'INFO', 'server')
try('hset', 'HSET', KEYS[1], 'probe', '1')
try('hgetall', 'HGETALL', KEYS[1])
try('hget', 'HGET', KEYS[1], 'probe')
try('hdel', 'HDEL', KEYS[1], 'probe')
try('pexpire', 'PEXPIRE', KEYS[1], 1000)
redis.pcall('DEL', KEYS[1])
return refused
