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
--         {-2, 0}      KEYS[2] is not an integer string: nothing was written
local v = redis.pcall('GET', KEYS[1])
if v ~= ARGV[1] then
  return {-1, 0}
end
local c = redis.pcall('GET', KEYS[2])
if type(c) == 'table' or (c and not string.match(c, '^%-?%d+$')) then
  return {-2, 0} -- not a count: another program's key under our name
end
c = tonumber(c or '0')
local d = tonumber(ARGV[2])
if c + d < 0 then
  return {0, c}
end
return {1, redis.call('INCRBY', KEYS[2], d)}
