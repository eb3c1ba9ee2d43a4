-- semaphore_limit.lua: change a semaphore's limit at run time, and hand
-- the permits a raise frees to the queued waiters they let in; only if
-- the limit's version is still the one the caller read, so a call that
-- lands late (after a later SetLimit) or runs a second time (a re-sent
-- command) writes nothing.
-- Uses internal/lualib (prepended).
--
-- KEYS[1]  S: the holders (sorted set)
-- KEYS[2]  P: permits per holder (hash)
-- KEYS[3]  L: the limit; stored without a TTL (it is configuration)
-- KEYS[4]  Q: the wait queue
-- KEYS[5]  V: the limit's version (a string integer; absent = 0; no TTL),
--          bumped by every call that applies
-- KEYS[6]  the waiters' leases (hash, lualib/queue.lua)
-- KEYS[7]  the tombstones (sorted set, lualib/queue.lua)
-- ARGV[1]  the new limit (>= 1), or 0 to delete L (each caller's own
--          limit applies again)
-- ARGV[2]  the pickup time in ms of permits handed to a waiter
-- ARGV[3]  the version the caller read from V ('0' if absent)
--
-- Holders above a lowered limit keep their permits; newcomers wait until
-- the permits in use drop below it.
--
-- Returns the permits in use; -2 if KEYS[1] is not a sorted set or
-- another key has a type or value not ours; -3 if V no longer holds
-- ARGV[3] (another SetLimit applied since the caller read it, or this
-- very call ran already). Nothing is written on -2 or -3.
local S, P, L, V = KEYS[1], KEYS[2], KEYS[3], KEYS[5]
local Q = q_keys(KEYS[4], KEYS[6], KEYS[7])
local t = redis.call('TYPE', S)['ok']
if (t ~= 'zset' and t ~= 'none') or not sem_limit(L, '0') or not sem_ok(P) or not q_ok(Q) then
  return -2
end
local v = redis.pcall('GET', V)
if is_err(v) or (v and not string.match(v, '^%d+$')) or (v and #v > 15) then
  return -2
end
if (v or '0') ~= ARGV[3] then
  return -3
end
redis.call('INCR', V)
if ARGV[1] == '0' then
  redis.call('DEL', L)
  return tonumber(redis.call('HGET', P, '#used') or '0')
end
redis.call('SET', L, ARGV[1])
local limit = tonumber(ARGV[1])
local now = now_ms(Q)
local used = sem_prune(S, P, now)
sem_pump(S, P, Q, limit - used, limit, now, ARGV[2], '')
sem_settle(S, P)
return tonumber(redis.call('HGET', P, '#used') or '0')
