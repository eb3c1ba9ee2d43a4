-- restore.lua: undo a lost GETSET (what the old recipe calls a "small inaccuracy").
--
-- A contender that found the lock expired ran GETSET key <ours> and got back
-- a timestamp that is not expired: another contender won just before it,
-- and our GETSET overwrote the winner's value. Put the winner's value back,
-- if nothing has been written since, so that the winner's compare-and-set
-- renewal and compare-and-delete release still find their own value.
-- The caller only asks for it when ARGV[2] >= ARGV[1] - 1, so the key's
-- claimed expiry never moves earlier than any holder's (see the legacy
-- package doc).
--
-- KEYS[1]  the lock key
-- ARGV[1]  the timestamp our GETSET wrote
-- ARGV[2]  the timestamp our GETSET returned (the winner's)
--
-- Returns  1  restored
--          0  the key no longer holds ARGV[1] (or is gone, or not a string):
--             left untouched
local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' or v ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2])
return 1
