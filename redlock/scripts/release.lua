-- release.lua: release one node's part of a Redlock (compare-and-delete).
--
-- KEYS[1]  the lock key
-- ARGV[1]  the holder's value
-- ARGV[2]  the wake-up channel: 'released' is published on it when the key
--          is deleted or already gone; '' publishes nothing (the clean-up of
--          an attempt that did not win, which must not wake everyone at once)
--
-- Returns  1 deleted, 0 the key is gone, -1 it holds another value,
--         -2 it is not a string; in the last two cases nothing is touched
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' and v.err then
  return -2
end
if v and v ~= ARGV[1] then
  return -1
end
local code = 0
if v then
  redis.call('DEL', KEYS[1])
  code = 1
end
if ARGV[2] ~= '' then
  redis.call('PUBLISH', ARGV[2], 'released')
end
return code
