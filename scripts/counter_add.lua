-- counter_add.lua: add to one segment of a segmented counter, only while
-- the caller holds that segment's lock, and never below zero.
--
-- KEYS[1]  the segment's lock key (holds the caller's token while held)
-- KEYS[2]  the segment's count (a string integer; absent = 0; no TTL)
-- ARGV[1]  the caller's lock token
-- ARGV[2]  the amount to add (negative: take)
--
-- Returns {1, count}   done; count = the segment's new value
--         {0, count}   not enough: the segment holds only count
--         {-1, 0}      the caller does not hold the segment's lock
local v = redis.pcall('GET', KEYS[1])
if v ~= ARGV[1] then
  return {-1, 0}
end
local c = tonumber(redis.call('GET', KEYS[2]) or '0')
local d = tonumber(ARGV[2])
if c + d < 0 then
  return {0, c}
end
return {1, redis.call('INCRBY', KEYS[2], d)}
