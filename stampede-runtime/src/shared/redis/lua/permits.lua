-- permits(admission; op, ...): a fleet-wide admission's permits, in one hash.
--   'p <token>' -> '<expiry ms>'          a permit, held until its holder gives it back or
--                                          stops renewing it (a dead holder's lapses)
--   'w <replica>' -> '<expiry ms> <count>' loads of that replica waiting for permits
-- The token is the holder's replica tag (8 hex digits) and 8 random ones: a permit is
-- counted once, and only its holder's token returns or renews it, so a permit reclaimed
-- from a holder presumed dead is never returned twice or counted over the limit.
--
-- take(op='take', replica, limit, ttl ms, wait ttl ms, returned token or '', token...)
--   -> {share, held, granted token...}
--   Gives back `returned` (a load that ended, swapping its permit for its replica's
--   waiters in one call), then grants some of the tokens: at most the free permits, and
--   at most this replica's fair share of the limit. The share is max-min fair over what
--   each replica holds and waits for, so one replica's backlog cannot starve another's.
--   Tokens already granted (a call sent again after its reply was lost) count as granted.
--   Tokens left ungranted are recorded as waiting, for the other replicas' shares.
-- renew(op='renew', ttl ms, token) -> 1 while the permit is still the token's, else 0.
-- give(op='give', token) -> 1 if the token's permit was recorded (lapsed or not), else 0.
local op = ARGV[1]
local now = now_ms()

-- '<expiry>' or '<expiry> <count>'; nil for anything we did not write.
local function entry(value)
  local expiry, count = string.match(value, '^(%d+) ?(%d*)$')
  expiry = exact(expiry)
  if expiry == nil then return nil end
  return expiry, exact(count) or 0
end

-- The hash's fields and values, or none where the key holds another type.
local function fields()
  local all = redis.pcall('HGETALL', KEYS[1])
  if type(all) == 'table' and all.err == nil then return all end
  redis.call('DEL', KEYS[1])
  return {}
end

-- Never shorter than it was: another replica may renew for longer.
local function keep_for(ms)
  local left = redis.pcall('PTTL', KEYS[1])
  if type(left) == 'number' and left > ms then ms = left end
  redis.pcall('PEXPIRE', KEYS[1], ms)
end

if op == 'renew' then
  local ttl, field = tonumber(ARGV[2]), 'p ' .. ARGV[3]
  local held = redis.pcall('HGET', KEYS[1], field)
  if type(held) ~= 'string' then return 0 end
  local expiry = entry(held)
  if expiry == nil or expiry < now then
    redis.call('HDEL', KEYS[1], field)
    return 0
  end
  if not wrote(redis.pcall('HSET', KEYS[1], field, digits(now + ttl))) then return 0 end
  keep_for(ttl)
  return 1
end

if op == 'give' then
  local field = 'p ' .. ARGV[2]
  if type(redis.pcall('HGET', KEYS[1], field)) ~= 'string' then return 0 end
  return redis.call('HDEL', KEYS[1], field)
end

if op ~= 'take' then return redis.error_reply('ERR unknown permits operation') end
local me, limit = ARGV[2], tonumber(ARGV[3])
local ttl, wait_ttl, returned = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local asked = {}
for i = 7, #ARGV do asked[ARGV[i]] = true end
if returned ~= '' then redis.pcall('HDEL', KEYS[1], 'p ' .. returned) end

-- Live permits, and what each replica holds and waits for; lapsed and foreign fields go.
local all = fields()
local held, mine, demand = 0, 0, {}
for i = 1, #all, 2 do
  local field = all[i]
  local kind, name = string.match(field, '^([pw]) (%x+)$')
  local expiry, count = nil, 0
  if kind ~= nil then expiry, count = entry(all[i + 1]) end
  if expiry == nil or expiry < now or (kind == 'p' and #name ~= 16) then
    redis.call('HDEL', KEYS[1], field)
  elseif kind == 'p' then
    local owner = string.sub(name, 1, 8)
    held = held + 1
    demand[owner] = (demand[owner] or 0) + 1
    if owner == me then
      mine = mine + 1
      if asked[name] then asked[name] = 'held' end
    end
  elseif name ~= me then
    demand[name] = (demand[name] or 0) + count
  end
end

-- The tokens granted already and those still asked for, in the order they were sent.
local granted, wanted = {}, {}
for i = 7, #ARGV do
  local token = ARGV[i]
  if asked[token] == 'held' then table.insert(granted, token)
  elseif asked[token] then table.insert(wanted, token) end
  asked[token] = nil
end
demand[me] = mine + #wanted

-- Max-min fair: replicas in order of demand each get what they ask for, up to an even
-- split of what the smaller ones left (rounded up, so no permit idles for want of a
-- remainder; the free count below still bounds the total). Ties go by name, so every
-- server orders them alike.
local order = {}
for name, d in pairs(demand) do table.insert(order, {name, d}) end
table.sort(order, function(a, b)
  if a[2] ~= b[2] then return a[2] < b[2] end
  return a[1] < b[1]
end)
local left, share = limit, 0
for i, replica in ipairs(order) do
  local fair = math.min(replica[2], math.ceil(left / (#order - i + 1)))
  if replica[1] == me then
    share = fair
    break
  end
  left = left - fair
end

local grant = math.min(#wanted, limit - held, share - mine)
local expiry, new = digits(now + ttl), 0
for i = 1, grant do
  if not wrote(redis.pcall('HSET', KEYS[1], 'p ' .. wanted[i], expiry)) then break end
  table.insert(granted, wanted[i])
  held, new = held + 1, new + 1
end
local waiting = #wanted - new
if waiting > 0 then
  redis.pcall('HSET', KEYS[1], 'w ' .. me, digits(now + wait_ttl) .. ' ' .. digits(waiting))
else
  redis.pcall('HDEL', KEYS[1], 'w ' .. me)
end
keep_for(math.max(ttl, wait_ttl))
local reply = {share, held}
for _, token in ipairs(granted) do table.insert(reply, token) end
return reply
