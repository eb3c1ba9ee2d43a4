-- renew.lua: extend one node's part of a Redlock (compare-and-expire).
-- GT: an expiry is never moved earlier, so a renewal that lands late
-- (after a later, longer one) or runs twice cannot cut the lock short,
-- and one for less than the key has left does nothing.
-- Uses owner_check (dlock's internal/lualib/owner.lua, prepended).
--
-- KEYS[1]  the lock key
-- KEYS[2]  the fence counter: its TTL is pushed out too
-- ARGV[1]  the holder's value
-- ARGV[2]  the TTL in milliseconds (the key expires no sooner)
-- ARGV[3]  the counter's TTL in milliseconds (the counter expires no sooner)
--
-- Returns  1 extended, 0 the key is gone, -1 it holds another value,
--         -2 it is not a string
local code = owner_check(KEYS[1], ARGV[1])
if code ~= 1 then
  return code
end
redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
redis.call('PEXPIRE', KEYS[2], ARGV[3], 'GT')
return 1
