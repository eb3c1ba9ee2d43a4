-- semaphore_release.lua: give a holder's permits back and hand them to the
-- queued waiters they let in (exactly as many as fit); or take a waiter
-- out of the queue. Uses internal/lualib (prepended).
--
-- KEYS[1]  S: the holders (sorted set)
-- KEYS[2]  P: permits per holder (hash)
-- KEYS[3]  L: the limit set by SetLimit, if any
-- KEYS[4]  Q: the wait queue
-- KEYS[5]  the waiters' leases (hash, lualib/queue.lua)
-- KEYS[6]  the tombstones (sorted set, lualib/queue.lua)
-- ARGV[1]  the holder's (or leaving waiter's) token
-- ARGV[2]  the wake-up channel: 'released' is published on it once per
--          freed permit left over when no waiter is queued (for barging
--          waiters), at most MAX_WAKES times: a release of many permits
--          must not hold Redis for one PUBLISH each (barging waiters not
--          woken retry on their own); by pcall_publish, so a PUBLISH the
--          ACL refuses is skipped and cannot end the script half done
-- ARGV[3]  the pickup time in ms of permits handed to a waiter
-- ARGV[4]  '0': release a holder; 'force': an operator takes a holder's
--          permits away (no tombstone, but the mark '!' .. token in the
--          tombstones for as long: the holder's own release then reports
--          the loss, -3); '1': a waiter leaves (and gives back permits
--          handed to it too late, if any)
-- ARGV[5]  the caller's limit, used if L is absent; '0': not known (an
--          admin release: the limit lives in the callers' handles)
--
-- The freed permits go to the queued waiters under the limit in force: L,
-- else the caller's. With neither known, nothing is handed: the first
-- live waiter is told to try again (q_nudge), and its own acquire hands
-- out what its limit lets in, so no release ever grants above the limit
-- the callers use.
--
-- A release leaves a tombstone for the token (q_released), so a second
-- run of it (re-sent by the Redis client after a lost reply) returns 1.
--
-- Returns  1  released
--          0  the holder was gone or its lease had ended (leaving: it
--             held nothing)
--         -2  KEYS[1] is not a sorted set, or another key has a type
--             or value not ours: nothing was written
--         -3  (a holder's release) an operator took the holder's permits
--             (the mark 'force' left): a loss, also when the release's
--             reply comes after the holder's deadline, as the other
--             release scripts' -3
-- (No -1: a semaphore's holders hold permits of their own, never a value
-- another holder could replace.)
local S, P, L, token = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local Q = q_keys(KEYS[4], KEYS[5], KEYS[6])
local s = redis.pcall('ZSCORE', S, token)
local limit = sem_limit(L, ARGV[5])
if is_err(s) or not limit or not sem_ok(P) or not q_ok(Q) then
  return -2
end
if ARGV[4] == '1' then
  q_leave(Q, token)
end
local now = now_ms(Q)
local used = sem_prune(S, P, now)
local code, freed = 0, 0
if s and tonumber(s) > now then
  freed = tonumber(redis.call('HGET', P, token) or '0')
  redis.call('ZREM', S, token)
  redis.call('HDEL', P, token)
  redis.call('HINCRBY', P, '#used', -freed)
  used = used - freed
  code = 1
  if ARGV[4] == '0' then
    q_released(Q, token)
  elseif ARGV[4] == 'force' then
    q_tomb(Q, '!' .. token)
  end
elseif ARGV[4] == '0' and q_dead(Q, token) then
  code = 1 -- this release already ran (its reply was lost): not a loss
elseif ARGV[4] == '0' and q_dead(Q, '!' .. token) then
  code = -3 -- taken by an operator (ForceRelease)
end
local MAX_WAKES = 64
local free = freed
if limit > 0 then
  free = sem_pump(S, P, Q, limit - used, limit, now, ARGV[3], '')
else
  q_nudge(Q)
end
if freed > 0 and redis.call('LLEN', Q.q) == 0 then
  for _ = 1, math.min(freed, free, MAX_WAKES) do
    pcall_publish(ARGV[2], 'released')
  end
end
sem_settle(S, P)
return code
