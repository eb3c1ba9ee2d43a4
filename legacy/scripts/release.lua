-- release.lua: delete a legacy lock we own (compare-and-delete) and wake the
-- dlock waiters. This is the old recipe's "check before DEL, or you delete someone
-- else's lock", made atomic: instead of comparing clocks, compare the value.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the timestamp we wrote last (acquire or latest renewal)
-- ARGV[2]  the wake-up channel of the key ('' publishes nothing)
--
-- Returns  1  released (and "released" published on ARGV[2])
--          0  the key is gone
--         -1  the key holds another value: left untouched
--         -2  the key exists but is not a string: left untouched
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
redis.call('DEL', KEYS[1])
if ARGV[2] ~= '' then
  redis.call('PUBLISH', ARGV[2], 'released')
end
return 1
