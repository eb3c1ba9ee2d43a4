-- release.lua: delete a lock we own (compare-and-delete) and wake its waiters.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the caller's token
-- ARGV[2]  the wake-up channel; '' publishes nothing
--
-- Returns  1  released (and one message published on ARGV[2])
--          0  the key is gone (expired or deleted)
--         -1  the key holds another owner's token: left untouched
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
