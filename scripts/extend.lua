-- extend.lua: reset the TTL of a lock we own (compare-and-expire).
--
-- KEYS[1]  the lock key
-- KEYS[2]  the fence counter key: its TTL is pushed out too, so the
--          counter (which `dlock list` finds locks by) lives as long as the lock
-- ARGV[1]  the caller's token
-- ARGV[2]  the new TTL in milliseconds
-- ARGV[3]  the fence counter's TTL in milliseconds (longer than ARGV[2])
--
-- Returns  1  extended
--          0  the key is gone (expired or deleted): the lock is lost
--         -1  the key holds another owner's token: the lock is lost
--         -2  the key exists but is not a string
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' and v.err then
  return -2
end
if not v then
  return 0
end
if v ~= ARGV[1] then
  return -1
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
