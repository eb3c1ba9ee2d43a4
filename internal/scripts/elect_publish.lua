-- elect_publish.lua: publish (or update) the leader record of an election
-- whose leader holds the lock KEYS[1]. Idempotent: a call re-sent by the
-- Redis client after a lost reply finds its own record and changes
-- nothing, so every call can be retried, and the leader's refresh is the
-- same call again.
--
-- KEYS[1]  the election's lock key: holds the leader's token
-- KEYS[2]  the leader history: a list of records, newest first, in KEYS[1]'s
--          Cluster slot. A record is "<term>:<rev>:<since>:<holder>:<value>":
--          term = the leader's fencing token (decimal), rev = the revision of
--          its value (1 when elected, +1 per Proclaim), since = server time
--          of the election in ms, holder = SHA1 hex of the leader's token,
--          value = the published value (any bytes).
-- ARGV[1]  the caller's token (never stored; only its SHA1)
-- ARGV[2]  the caller's term (its lock's fence, decimal)
-- ARGV[3]  the revision of ARGV[4] (decimal, from 1)
-- ARGV[4]  the value to publish
-- ARGV[5]  ms the history lives after this call (its TTL is never lowered)
-- ARGV[6]  the pub/sub channel told of every change ("<term>:<rev>"), by
--          pcall_publish: a PUBLISH the ACL refuses is skipped, after the
--          record was written
-- ARGV[7]  the most records the history keeps
--
-- The history keeps one record per revision, so an observer can deliver
-- every value. If the head record is the caller's (same holder, same
-- term), a record is pushed only for a higher revision: a revision that
-- lands late or twice writes nothing. Otherwise a record is pushed if its
-- term is above the head's.
--
-- Returns {1, since, now}  published (or already there); since = the
--                       record's election time, now = the server's clock (ms)
--         {0, ''}       KEYS[1] does not hold ARGV[1]: not the leader
--         {-2, ''}      KEYS[1] or KEYS[2] is of another type
--         {-3, term}    the head record has a term >= ARGV[2] from another
--                       holder (the fence counter went back): nothing written
local token, term, rev, value = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]

local cur = redis.pcall('GET', KEYS[1])
if is_err(cur) then
  return {-2, ''}
end
if cur ~= token then
  return {0, ''}
end
local head = redis.pcall('LINDEX', KEYS[2], 0)
if is_err(head) then
  return {-2, ''}
end

local holder = redis.sha1hex(token)
local ht, hr, hs, hh
if head then
  ht, hr, hs, hh = string.match(head, '^(%d+):(%d+):(%d+):(%x+):')
end
local function record(since)
  return ARGV[2] .. ':' .. ARGV[3] .. ':' .. since .. ':' .. holder .. ':' .. value
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local since, push
if ht and hh == holder and tonumber(ht) == term then
  since, push = hs, rev > tonumber(hr)
elseif ht and tonumber(ht) >= term then
  return {-3, ht}
else
  since, push = string.format('%d', now), true
end
if push then
  redis.call('LPUSH', KEYS[2], record(since))
  redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[7]) - 1)
  pcall_publish(ARGV[6], ARGV[2] .. ':' .. ARGV[3])
end
redis.call('PEXPIRE', KEYS[2], math.max(tonumber(ARGV[5]), redis.call('PTTL', KEYS[2])))
return {1, since, now}
