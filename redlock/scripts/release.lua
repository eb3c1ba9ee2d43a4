-- release.lua: release one node's part of a Redlock (compare-and-delete).
-- Uses owner_check and pcall_publish (dlock's internal/lualib, prepended): a
-- refused PUBLISH (ACL) loses the wake-up, never the DEL.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the holder's value
-- ARGV[2]  the wake-up channel: 'released' is published on it when the key
--          is deleted or already gone; '' publishes nothing (the clean-up of
--          an attempt that did not win, which must not wake everyone at once)
--
-- Returns  1 deleted, 0 the key is gone, -1 it holds another value,
--         -2 it is not a string; in the last two cases nothing is touched
local code = owner_check(KEYS[1], ARGV[1])
if code < 0 then
  return code
end
if code == 1 then
  redis.call('DEL', KEYS[1])
end
if ARGV[2] ~= '' then
  pcall_publish(ARGV[2], 'released')
end
return code
