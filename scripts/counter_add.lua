-- counter_add.lua: add to one segment of a segmented counter, only while
-- the caller holds that segment's lock (unless putting units back), and
-- never below zero. Each call carries a fresh operation id: a call that
-- applies leaves a marker under it, so the same call run a second time
-- (the Redis client re-sends a command whose reply a broken connection
-- lost) reports what the first did instead of adding again.
--
-- KEYS[1]  the segment's lock key (holds the caller's token while held)
-- KEYS[2]  the segment's count (a string integer; absent = 0; no TTL)
-- KEYS[3]  the operation's marker: the segment lock's queue name plus ':'
--          and the operation id (a waiter-lease name, expiring in 10 s)
-- ARGV[1]  the caller's lock token
-- ARGV[2]  the amount to add (negative: take)
-- ARGV[3]  'back': put units back (no lock check); otherwise a take or
--          add under the lock
--
-- Returns {1, count}   done (now or by an earlier run of this operation);
--                      count = the segment's value
--         {0, count}   not enough: the segment holds only count
--         {-1, 0}      the caller does not hold the segment's lock
--         {-2, 0}      KEYS[2] is not an integer string: nothing was written
local c = redis.pcall('GET', KEYS[2])
if type(c) == 'table' or (c and not string.match(c, '^%-?%d+$')) then
  return {-2, 0} -- not a count: another program's key under our name
end
c = tonumber(c or '0')
if redis.pcall('GET', KEYS[3]) == '~applied' then
  return {1, c} -- this operation already ran
end
if ARGV[3] ~= 'back' and redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
  return {-1, 0}
end
local d = tonumber(ARGV[2])
if c + d < 0 then
  return {0, c}
end
redis.call('SET', KEYS[3], '~applied', 'PX', 10000)
return {1, redis.call('INCRBY', KEYS[2], d)}
