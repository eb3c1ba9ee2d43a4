-- fence.lua: write a Redlock grant's fencing token back to one node: raise
-- the node's fence counter to it ("set if greater"), provided the node's lock
-- key still holds the attempt's value.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the fence counter
-- ARGV[1]  the attempt's value
-- ARGV[2]  the fencing token, a decimal string without leading zeros
-- ARGV[3]  the counter's TTL in milliseconds (longer than the lock's)
--
-- Returns  1  the counter is now at least ARGV[2]
--          0  the lock key does not hold ARGV[1]: nothing written
local v = redis.pcall('GET', KEYS[1])
if v ~= ARGV[1] then
  return 0
end
local cur, f = redis.pcall('GET', KEYS[2]), ARGV[2]
if type(cur) ~= 'string' or not string.match(cur, '^[1-9]%d*$')
    or #cur < #f or (#cur == #f and cur < f) then
  redis.call('SET', KEYS[2], f, 'PX', ARGV[3])
else
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return 1
