-- semaphore_extend.lua: renew a holder's permits.
-- Uses internal/lualib (prepended).
--
-- KEYS[1]  S: the holders (sorted set)
-- KEYS[2]  P: permits per holder (hash)
-- KEYS[3]  the fence counter, kept at least ARGV[3] ms more
-- ARGV[1]  the holder's token
-- ARGV[2]  the TTL in milliseconds: the holder's lease ends ARGV[2] ms
--          from now at the earliest (ZADD GT: a lease end is never moved
--          earlier, so a late or repeated renewal cannot cut short what a
--          later, longer one confirmed)
-- ARGV[3]  the fence counter TTL in milliseconds
--
-- Returns  1  renewed: the holder's lease ends ARGV[2] ms from now, or
--             later if it already did
--          0  the holder is gone or its lease had ended: its permits
--             were (or will be) given back; it is lost
--         -2  KEYS[1] is not a sorted set, or KEYS[2] not a hash:
--             nothing was written
local s = redis.pcall('ZSCORE', KEYS[1], ARGV[1])
if is_err(s) or not sem_ok(KEYS[2]) then
  return -2
end
local now = now_ms()
sem_prune(KEYS[1], KEYS[2], now) -- give back the permits of ended leases (ours too)
if not s or tonumber(s) <= now then
  return 0
end
redis.call('ZADD', KEYS[1], 'GT', now + tonumber(ARGV[2]), ARGV[1])
sem_settle(KEYS[1], KEYS[2])
keep_for(KEYS[3], ARGV[3])
return 1
