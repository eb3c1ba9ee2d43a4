-- force.lua: delete a lock whoever holds it (an operator's steal), and wake
-- its waiters. The holder learns of it at its next renewal (ErrExpired).
--
-- KEYS[1]  the lock key
-- ARGV[1]  the wake-up channel
--
-- Returns  1  deleted
--          0  there was no such key
--         -2  the key is not a string: left untouched (it is not a lock)
local t = redis.call('TYPE', KEYS[1]).ok
if t == 'none' then
  return 0
end
if t ~= 'string' then
  return -2
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[1], 'released')
return 1
