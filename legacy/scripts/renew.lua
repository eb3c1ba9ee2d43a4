-- renew.lua: push out the expiry of a legacy lock we own (compare-and-set).
--
-- The key holds the lock's expiry time as a decimal Unix timestamp (seconds
-- or milliseconds) and has no Redis TTL. Owning it means: it still holds the
-- exact timestamp we wrote last. Uses owner_check (dlock's
-- internal/lualib/owner.lua, prepended).
--
-- KEYS[1]  the lock key
-- ARGV[1]  the timestamp we wrote last (acquire or previous renewal)
-- ARGV[2]  the new timestamp (now + timeout + 1, never lower than ARGV[1])
--
-- Returns  1  renewed: KEYS[1] now holds ARGV[2], still without a TTL
--          0  the key is gone (released by force, or deleted): the lock is lost
--         -1  the key holds another value (a takeover after expiry, a GETSET
--             loser's overwrite, a foreign writer): left untouched, lock lost
--         -2  the key exists but is not a string: left untouched
local code = owner_check(KEYS[1], ARGV[1])
if code ~= 1 then
  return code
end
redis.call('SET', KEYS[1], ARGV[2])
return 1
