-- acquire.lua: take a free lock (SET NX PX semantics) and draw its fencing token.
--
-- KEYS[1]  the lock key (holds the owner's token as a plain string with a PX TTL)
-- KEYS[2]  the fence counter key (same Cluster slot as KEYS[1])
-- ARGV[1]  the caller's token
-- ARGV[2]  the lock TTL in milliseconds
-- ARGV[3]  the fence counter TTL in milliseconds (longer than ARGV[2])
--
-- Returns {1, fence}  acquired; fence = max(last fence + 1, server TIME in microseconds),
--                     so it keeps increasing after the counter key itself expires.
--                     If KEYS[1] already holds ARGV[1] (a retried acquire whose first
--                     reply was lost), the TTL is reset and the current fence returned.
--         {0, pttl}   held by another owner; pttl = its remaining TTL in ms (-1: no TTL)
--         {-2, 0}     KEYS[1] exists but is not a string (not a lock)
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' and v.err then
  return {-2, 0}
end
if v then
  if v ~= ARGV[1] then
    return {0, redis.call('PTTL', KEYS[1])}
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0') or 0}
end
local now = redis.call('TIME')
local fence = tonumber(now[1]) * 1000000 + tonumber(now[2])
local last = tonumber(redis.pcall('GET', KEYS[2])) or 0
if last >= fence then
  fence = last + 1
end
redis.call('SET', KEYS[2], string.format('%d', fence), 'PX', ARGV[3])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, fence}
