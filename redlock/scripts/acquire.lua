-- acquire.lua: one node's part of a Redlock acquire. Takes the lock key if
-- it is free (SET NX PX semantics) and reads the node's fence counter, which
-- the client combines with the other nodes' counters. Uses is_err (dlock's
-- internal/lualib/fence.lua, prepended).
--
-- KEYS[1]  the lock key
-- KEYS[2]  the fence counter (same Cluster slot as KEYS[1])
-- ARGV[1]  the attempt's value (unique per attempt)
-- ARGV[2]  the lock TTL in milliseconds
--
-- Returns {1, counter}     taken (or it already held ARGV[1]: a retried
--                          request). counter is the fence counter as a
--                          decimal string; if there is none (or it is not a
--                          decimal number of at most 18 digits, so tokens
--                          always fit in an int64), the server's TIME in
--                          microseconds.
--         {0, pttl, value} held by value, which expires in pttl ms (-1: never)
--         {-2, 0}          KEYS[1] is not a string (not a lock)
local v = redis.pcall('GET', KEYS[1])
if is_err(v) then
  return {-2, 0}
end
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
elseif v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
else
  return {0, redis.call('PTTL', KEYS[1]), v}
end
local f = redis.pcall('GET', KEYS[2])
if type(f) ~= 'string' or #f > 18 or not string.match(f, '^[1-9]%d*$') then
  local t = redis.call('TIME')
  f = t[1] .. string.format('%06d', tonumber(t[2]))
end
return {1, f}
