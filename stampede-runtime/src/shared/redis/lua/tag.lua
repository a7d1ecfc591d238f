-- tag(tag; keep ms, channel, replica, tag name) -> the tag's new version as decimal text, or
-- 'memory <version>' when memory is full and the version could not be kept (the notice still
-- went out; the caller sends it again).
-- A version is the server's clock in microseconds, or one above the version stored when
-- that is higher: it only rises, and a tag whose record expired starts above every version
-- an entry could have recorded before.
local t = redis.call('TIME')
local version = tonumber(t[1]) * 1000000 + tonumber(t[2])
local held = exact(get_string(KEYS[1]))
if held ~= nil and held >= version then version = held + 1 end
local text = digits(version)
-- Never shorter than it was: another replica may keep entries longer than this one does.
local keep = tonumber(ARGV[1])
local left = redis.pcall('PTTL', KEYS[1])
if type(left) == 'number' and left > keep then keep = left end
local kept = wrote(redis.pcall('SET', KEYS[1], text, 'PX', keep))
redis.call('PUBLISH', ARGV[2], 't ' .. text .. ' ' .. ARGV[3] .. ' ' .. ARGV[4])
if not kept then return 'memory ' .. text end
return text
