-- permits(admission; op, ...): a fleet-wide admission's permits, in one hash.
--   'p <token>' -> '<expiry ms>'          a permit, held until its holder gives it back or
--                                          stops renewing it (a dead holder's lapses)
--   'w <replica>' -> '<expiry ms> <count>' loads of that replica waiting for permits
-- The token is the holder's replica tag (8 hex digits) and 16 random ones: a permit is
-- counted once, and only its holder's token returns or renews it, so a permit reclaimed
-- from a holder presumed dead is never returned twice or counted over the limit.
--
-- take(op='take', replica, limit, ttl ms, wait ttl ms, returned token or '', token...)
--   -> {share, held, granted token...}
--   Gives back `returned` (a load that ended, swapping its permit for its replica's
--   waiters in one call), then grants some of the tokens: at most the free permits, and
--   at most this replica's fair share of the limit (see below). Tokens already granted
--   (a call sent again after its reply was lost) count as granted, and come first.
--   Tokens left ungranted are recorded as waiting, for the other replicas' shares.
-- renew(op='renew', ttl ms, token) -> 1 while the permit is still the token's, else 0.
-- give(op='give', token) -> 1 if the token's permit was recorded (lapsed or not), else 0.
--
-- A refusal other than the key holding another type (an ACL without the hash commands,
-- a command renamed away) is answered as an error, so the replica takes its local share
-- instead of acting on half an answer. With memory full (`noeviction`) each operation
-- deletes before it writes, so it still renews and grants (a permit is a few bytes).
local op = ARGV[1]
local now = now_ms()
-- How long the replicas above an even split keep their turn at the remainder: short, so
-- a replica waits few turns for one; long against a poll, so permits do not churn.
local TURN_MS = 250

-- '<expiry>' or '<expiry> <count>'; nil for anything we did not write.
local function entry(value)
  local expiry, count = string.match(value, '^(%d+) ?(%d*)$')
  expiry = exact(expiry)
  if expiry == nil then return nil end
  return expiry, exact(count) or 0
end

local function refused(reply)
  return type(reply) == 'table' and reply.err ~= nil
end

local function wrong_type(reply)
  return refused(reply) and string.sub(reply.err, 1, 9) == 'WRONGTYPE'
end

local function fail(reply)
  return redis.error_reply('ERR stampede permits: ' .. reply.err)
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
  if wrong_type(held) then return 0 end
  if refused(held) then return fail(held) end
  if type(held) ~= 'string' then return 0 end
  local expiry = entry(held)
  -- Deleted first: the write that lets the next one through with memory full.
  redis.call('HDEL', KEYS[1], field)
  if expiry == nil or expiry < now then return 0 end
  local written = redis.pcall('HSET', KEYS[1], field, digits(now + ttl))
  if refused(written) then return fail(written) end
  keep_for(ttl)
  return 1
end

if op == 'give' then
  local field = 'p ' .. ARGV[2]
  local held = redis.pcall('HGET', KEYS[1], field)
  if wrong_type(held) then return 0 end
  if refused(held) then return fail(held) end
  if type(held) ~= 'string' then return 0 end
  return redis.call('HDEL', KEYS[1], field)
end

if op ~= 'take' then return redis.error_reply('ERR unknown permits operation') end
local me, limit = ARGV[2], tonumber(ARGV[3])
local ttl, wait_ttl, returned = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local asked = {}
for i = 7, #ARGV do asked[ARGV[i]] = true end

local all = redis.pcall('HGETALL', KEYS[1])
if wrong_type(all) then
  redis.call('DEL', KEYS[1])
  all = {}
elseif refused(all) then
  return fail(all)
end
-- This replica's waiting entry is written again below; deleted first, it is the write
-- that lets the grants through with memory full.
redis.call('HDEL', KEYS[1], 'w ' .. me)
if returned ~= '' then redis.call('HDEL', KEYS[1], 'p ' .. returned) end

-- Live permits, and what each replica holds and waits for; lapsed and foreign fields go.
local held, mine, demand = 0, 0, {}
for i = 1, #all, 2 do
  local field = all[i]
  local kind, name = string.match(field, '^([pw]) (%x+)$')
  local expiry, count = nil, 0
  if kind ~= nil then expiry, count = entry(all[i + 1]) end
  if expiry == nil or expiry < now or (kind == 'p' and #name ~= 24) then
    redis.call('HDEL', KEYS[1], field)
  elseif kind == 'p' then
    if name ~= returned then
      local owner = string.sub(name, 1, 8)
      held = held + 1
      demand[owner] = (demand[owner] or 0) + 1
      if owner == me then
        mine = mine + 1
        if asked[name] then asked[name] = 'held' end
      end
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

-- Max-min fair in whole permits: replicas in order of demand each get what they ask for
-- while it is within an even split of what the smaller ones left; the rest split what
-- remains evenly, and the remainder goes round them by turns of TURN_MS (by name from
-- a place that moves each turn), so each of them gets one within (their number ÷ the
-- remainder) turns however the numbers fall.
local order = {}
for name, d in pairs(demand) do table.insert(order, {name, d}) end
table.sort(order, function(a, b)
  if a[2] ~= b[2] then return a[2] < b[2] end
  return a[1] < b[1]
end)
local left, share, rest = limit, nil, {}
for i, replica in ipairs(order) do
  if replica[2] <= math.floor(left / (#order - i + 1)) then
    if replica[1] == me then share = replica[2] end
    left = left - replica[2]
  else
    for j = i, #order do table.insert(rest, order[j][1]) end
    break
  end
end
if share == nil then
  table.sort(rest)
  local base = math.floor(left / #rest)
  local extra = left - base * #rest
  local turn = math.floor(now / TURN_MS) % #rest
  for j, name in ipairs(rest) do
    if name == me then
      share = base
      if (j - 1 - turn) % #rest < extra then share = base + 1 end
    end
  end
end

local grant = math.min(#wanted, limit - held, share - mine)
local expiry, new = digits(now + ttl), 0
for i = 1, grant do
  local written = redis.pcall('HSET', KEYS[1], 'p ' .. wanted[i], expiry)
  if refused(written) then
    if string.sub(written.err, 1, 3) ~= 'OOM' then return fail(written) end
    break
  end
  table.insert(granted, wanted[i])
  held, new = held + 1, new + 1
end
local waiting = #wanted - new
if waiting > 0 then
  redis.pcall('HSET', KEYS[1], 'w ' .. me, digits(now + wait_ttl) .. ' ' .. digits(waiting))
end
keep_for(math.max(ttl, wait_ttl))
local reply = {share, held}
for _, token in ipairs(granted) do table.insert(reply, token) end
return reply
