-- renew.lua: extend one node's part of a Redlock (compare-and-expire).
-- Uses owner_check (dlock's internal/lualib/owner.lua, prepended).
--
-- KEYS[1]  the lock key
-- KEYS[2]  the fence counter: its TTL is pushed out too
-- ARGV[1]  the holder's value
-- ARGV[2]  the new TTL in milliseconds
-- ARGV[3]  the counter's TTL in milliseconds
--
-- Returns  1 extended, 0 the key is gone, -1 it holds another value,
--         -2 it is not a string
local code = owner_check(KEYS[1], ARGV[1])
if code ~= 1 then
  return code
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
