-- renew.lua: extend one node's part of a Redlock (compare-and-expire).
--
-- KEYS[1]  the lock key
-- KEYS[2]  the fence counter: its TTL is pushed out too
-- ARGV[1]  the holder's value
-- ARGV[2]  the new TTL in milliseconds
-- ARGV[3]  the counter's TTL in milliseconds
--
-- Returns  1 extended, 0 the key is gone, -1 it holds another value,
--         -2 it is not a string
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
