-- queue.lua: the FIFO wait queue every lock script shares (prepended).
--
-- A queue is three keys, all declared by every script that touches them
-- (KEYS; a script never builds a key name), in the lock key's Cluster
-- slot, passed around as one table qs = q_keys(Q, W, T):
--   Q  list: waiter tokens, oldest first
--   W  hash: token -> a live waiter's lease, '<end ms>|<payload>'. The end
--      is server time (now_ms); an entry whose end has passed is a dead
--      waiter, pruned when a walk of the queue meets it (Redis 7.0 has no
--      per-field expiry). The payload is the pub/sub channel the waiter's
--      hand-off is published on, optionally followed by '{' and what it
--      asks for: 'r' for a shared (read) hold, or a number of semaphore
--      permits. Nothing after the channel means an exclusive lock.
--      Channels never contain '{' (the Client's prefix cannot), so the
--      split is unambiguous.
--   T  sorted set: the tombstones (below), each scored with its end (ms)
-- Q and W expire with the longest lease of their waiters (every join
-- raises their TTLs to the joiner's lease), T with its last tombstone.
--
-- The pickup state. A hand-off takes the waiter out of Q, gives it what it
-- waited for for the pickup time only (the lock key holding its token, or
-- its permits or read handle scored with the pickup's end), tells it on
-- its channel (q_notify: SHA1 of its token, never the token), and marks
-- its lease handed: '!' in front of the payload, end unchanged (q_serve
-- does all of it but the hold, for every hand-off). The waiter's next
-- acquire confirms (its grant deletes the lease: a granted waiter keeps
-- no lease). If that acquire comes after the pickup lapsed (a GC pause, a
-- stalled CPU), it finds the mark and puts the waiter back at the head of
-- Q (q_join): it is the next one served. A waiter that died leaves only
-- the marked lease, which ends with its lease; nobody waits for it.

-- The tombstone. A waiter that leaves for good (q_leave: it gave up, or
-- the engine withdraws an acquire whose reply was lost or came too late)
-- leaves its token in T for Q_DEAD_MS. Every acquire script refuses a
-- token with a tombstone (q_dead) before it touches anything, so an
-- acquire of a given-up token that lands after its withdrawal (delayed in
-- the network, or behind a stalled client) can neither take the key nor
-- rejoin the queue: the token is never granted again, and nothing is left
-- held by nobody. The engine never reuses a withdrawn token, so a
-- tombstone past its end that is still in T (pruned as scripts pass)
-- refuses nothing that could come. A multi-key lock's release, or leave,
-- that finds a key not holding its token adds '!' and the token to that
-- key's T too (see q_mark_lost). An operator's steal (release.lua's
-- 'force') adds '^' and the value it released (q_mark_stolen). Tokens are
-- base64url ([A-Za-z0-9_-]), so neither mark is ever a token.
local Q_DEAD_MS, Q_PRUNE = 10000, 16

-- q_keys makes the queue table of Q, W and T (see above); it also keeps
-- the server time of the script's run, read once (server_time).
local function q_keys(q, w, t)
  return {q = q, w = w, t = t}
end

-- q_now is the server's clock in ms, read once per run (now_ms).
local function q_now(qs)
  return now_ms(qs)
end

-- q_lease returns the payload and end of v, a lease as W holds it, if
-- the lease is live; nil if v is false (none) or has ended.
local function q_lease(qs, v)
  if not v then
    return nil
  end
  local i = string.find(v, '|', 1, true)
  local e = i and tonumber(string.sub(v, 1, i - 1))
  if not e or e <= q_now(qs) then
    return nil
  end
  return string.sub(v, i + 1), e
end

-- q_dead reports whether token left the queue for good (a tombstone in
-- T); nil if T is not a sorted set (another program's key: write nothing).
local function q_dead(qs, token)
  local s = redis.pcall('ZSCORE', qs.t, token)
  if is_err(s) then
    return nil
  end
  return s ~= false
end

-- q_dead_fence is q_dead(qs, token) and fence_read(f) for the acquire
-- scripts: it returns true if token is dead (nil if T is foreign), else
-- false and f's value (nil: not a counter; see fence_mget). With k, the
-- lock key is read too, in f's MGET, and its value is the third result:
-- nil if it is missing or not a string (MGET cannot tell those apart: the
-- caller reads it again, type-checked, when it needs to know).
local function q_dead_fence(qs, token, f, k)
  local dead = q_dead(qs, token)
  if dead ~= false then
    return dead
  end
  local r
  if k then
    r = redis.call('MGET', f, k)
  else
    r = redis.call('MGET', f)
  end
  return false, fence_mget(f, r[1]), r[2] or nil
end

-- q_notify tells the waiter token, on its Client's channel ch, that its
-- turn came. It publishes SHA1(token), never the token: anyone allowed to
-- PSUBSCRIBE reads the channel (on a Cluster the message reaches every
-- node), and a token releases its lock. The waiter's Client maps the
-- digest back to the waiter; nobody can get a token from it. A PUBLISH the
-- ACL refuses is skipped (pcall_publish): the waiter is not woken, and
-- the hand-off is as if its message were lost.
local function q_notify(ch, token)
  pcall_publish(ch, redis.sha1hex(token))
end

-- q_parse splits a payload into its channel and its request (a handed
-- mark, if any, is dropped).
local function q_parse(p)
  if string.byte(p, 1) == 33 then -- '!'
    p = string.sub(p, 2)
  end
  local i = string.find(p, '{', 1, true)
  if not i then
    return p, ''
  end
  return string.sub(p, 1, i - 1), string.sub(p, i + 1)
end

-- q_ok reports whether Q is a list and W a hash, or missing (else one is
-- another program's key under our name: the caller writes nothing).
local function q_ok(qs)
  return not is_err(redis.pcall('LLEN', qs.q)) and not is_err(redis.pcall('HLEN', qs.w))
end

-- q_serve walks Q from its head and serves its waiters in order, as many
-- as fit. A dead waiter (no lease, or one that ended) is dropped, and its
-- lease with it. For each live one, serve(m, req, ch) decides, req being
-- what m asks for and ch its channel (q_parse); for self, the caller's own
-- token, serve(self, nil) is asked without reading its lease (the caller
-- knows what it asks for), and may answer only 'wait' or 'pop' (self has
-- no lease or channel read here to mark or tell; a caller that must
-- refuse itself does so before the walk, as semaphore_acquire does for a
-- request above the limit):
--   'wait'  m does not fit: it stays at the head, and the walk ends
--   'hand'  serve gave m its hold for the pickup time: m leaves Q, its
--           lease is marked handed (the pickup state) and it is told on
--           its channel (q_notify)
--   'deny'  m can never be served: it leaves Q, its lease goes, and it is
--           told (its next acquire fails)
--   'pop'   m leaves Q, nothing else (self, served by the caller)
-- A second result true ends the walk after m. peek: serve may answer
-- 'wait', so each head is read (LINDEX) before it is popped; without,
-- every live waiter is served, and heads are popped at once (LPOP).
-- Returns nil, having written nothing, if Q is not a list; false if Q ran
-- out; else the answer that ended the walk. head, lease (without peek):
-- the caller popped Q's head already, head (false: Q was empty), and
-- read its lease (false: none; nil: not read; see q_release).
local function q_serve(qs, self, peek, serve, head, lease)
  local q, w = qs.q, qs.w
  local m = head
  if m ~= nil then
    -- popped by the caller
  elseif peek then
    m = redis.pcall('LINDEX', q, 0)
  else
    m = redis.pcall('LPOP', q)
  end
  if is_err(m) then
    return nil
  end
  while m do
    local v, p, e, ch, req = lease
    lease = nil
    local act, stop = 'pop', false
    if m == self then
      act, stop = serve(m, nil)
    else
      if v == nil then
        v = redis.call('HGET', w, m)
      end
      p, e = q_lease(qs, v)
      if p then
        ch, req = q_parse(p)
        act, stop = serve(m, req, ch)
      elseif v then
        redis.call('HDEL', w, m) -- an ended lease
      end
    end
    if act == 'wait' then
      return act
    end
    if peek then
      redis.call('LPOP', q)
    end
    if act == 'hand' then
      if string.byte(p, 1) ~= 33 then -- not marked yet
        redis.call('HSET', w, m, string.format('%d|!', e) .. p)
      end
      q_notify(ch, m)
    elseif act == 'deny' then
      redis.call('HDEL', w, m)
      q_notify(ch, m)
    end
    if stop then
      return act
    end
    if peek then
      m = redis.call('LINDEX', q, 0)
    else
      m = redis.call('LPOP', q)
    end
  end
  return false
end

-- q_ahead reports whether a live waiter other than token is first in Q.
-- Dead waiters at the head are dropped; token itself, if first, is popped
-- (the caller is about to take what it waited for). Returns nil, having
-- written nothing, if Q is not a list.
local function q_ahead(qs, token)
  local r = q_serve(qs, token, true, function(m)
    if m == token then
      return 'pop', true
    end
    return 'wait'
  end)
  if r == nil then
    return nil
  end
  return r == 'wait'
end

-- q_empty reports whether nobody is queued in Q (dead waiters count: see
-- q_ahead). Returns nil if Q is not a list.
local function q_empty(qs)
  local head = redis.pcall('LINDEX', qs.q, 0)
  if is_err(head) then
    return nil
  end
  return not head
end

-- q_nudge tells the first live waiter of Q, on its channel, to try again
-- now, handing it nothing (dead waiters at the head are dropped): its own
-- acquire then serves the queue with what only the waiters know (a
-- semaphore's limit). To the waiter it looks like a hand-off whose
-- permits were not there. Returns nil, having written nothing, if Q is not
-- a list.
local function q_nudge(qs)
  return q_serve(qs, nil, true, function(m, req, ch)
    q_notify(ch, m)
    return 'wait'
  end)
end

-- q_may_take reports whether token may take a free key now: always when
-- barging, else when no live waiter is ahead of it in Q (see q_ahead).
-- Returns nil, having written nothing, if Q is not a list.
local function q_may_take(qs, token, mode)
  if mode == 'barge' then
    return true
  end
  local ahead = q_ahead(qs, token)
  if ahead == nil then
    return nil
  end
  return not ahead
end

-- q_keep makes Q live at least ms more: its TTL is raised, never lowered
-- (GT). created: the caller's push just created Q (the push answered 1),
-- so it has no TTL yet, and gets ms. One command either way: a list we
-- created always has a TTL, so PEXPIRE GT need not read it first.
local function q_keep(q, ms, created)
  if created then
    redis.call('PEXPIRE', q, ms)
  else
    redis.call('PEXPIRE', q, ms, 'GT')
  end
end

-- q_keep_leases makes W live at least ms more, like q_keep: raised (GT),
-- or set if W has no TTL (NX: the HSET before just created it).
local function q_keep_leases(w, ms)
  if redis.call('PEXPIRE', w, ms, 'GT') == 0 then
    redis.call('PEXPIRE', w, ms, 'NX')
  end
end

-- q_join refreshes token's lease to lease ms with payload p, and keeps
-- token queued: at the tail on a first attempt (first); else back at the
-- head if its hand-off lapsed (the lease is marked handed), or at the
-- tail if its lease had ended and it is no longer in the list. A retry
-- (not first) needs a caller that checked that Q and W are a list and a
-- hash or missing (q_ok, or the LINDEX of q_empty or q_ahead, in the same
-- script run): it does not read their types again. A first attempt
-- checks them itself, with its first writes: it returns false, having
-- written nothing, if Q is not a list or W not a hash, so an acquire
-- that found the key held reads nothing of Q before it joins. Returns
-- true otherwise.
local function q_join(qs, token, p, lease, first)
  local q, w = qs.q, qs.w
  local v = string.format('%d|', q_now(qs) + tonumber(lease)) .. p
  local n = 0
  if first then
    if is_err(redis.pcall('HSET', w, token, v)) then
      return false
    end
    n = redis.pcall('RPUSH', q, token)
    if is_err(n) then
      redis.call('HDEL', w, token)
      return false
    end
  else
    local had = q_lease(qs, redis.call('HGET', w, token))
    redis.call('HSET', w, token, v)
    if had and string.byte(had, 1) == 33 then
      if not redis.call('LPOS', q, token) then
        n = redis.call('LPUSH', q, token)
      end
    elseif not had and not redis.call('LPOS', q, token) then
      n = redis.call('RPUSH', q, token)
    end
  end
  q_keep(q, lease, n == 1)
  q_keep_leases(w, lease)
  return true
end

-- q_granted ends token's wait: it got what it waited for, so its lease
-- goes (it is not in the list any more).
local function q_granted(qs, token)
  redis.call('HDEL', qs.w, token)
end

-- q_drop takes token out of Q and deletes its lease (no tombstone: the
-- caller may use token again). Returns false, having written nothing, if
-- Q is not a list.
local function q_drop(qs, token)
  if is_err(redis.pcall('LREM', qs.q, 0, token)) then
    return false
  end
  redis.call('HDEL', qs.w, token)
  return true
end

-- q_tomb adds member to T for Q_DEAD_MS, and T lives as long (every
-- tombstone has the same span, so the last one added ends last). About
-- one call in Q_PRUNE (by the clock's last digits) also drops the
-- tombstones that ended, so T holds about Q_DEAD_MS of them.
local function q_tomb(qs, member)
  local now = q_now(qs)
  redis.call('ZADD', qs.t, now + Q_DEAD_MS, member)
  redis.call('PEXPIRE', qs.t, Q_DEAD_MS)
  if now % Q_PRUNE == 0 then
    redis.call('ZREMRANGEBYSCORE', qs.t, '-inf', now)
  end
end

-- q_leave takes token out of Q for good: its lease is replaced by a
-- tombstone. Returns false, having written nothing, if Q is not a list.
local function q_leave(qs, token)
  if is_err(redis.pcall('LREM', qs.q, 0, token)) then
    return false
  end
  redis.call('HDEL', qs.w, token)
  q_tomb(qs, token)
  return true
end

-- q_released marks that token's holder released its hold: the same
-- tombstone as q_leave's, so no acquire grants token again, and a release
-- of token that finds nothing (because this one ran and its reply was
-- lost, and the Redis client sent it again on a new connection) can tell
-- that apart from a loss with q_dead.
local function q_released(qs, token)
  q_tomb(qs, token)
end

-- q_mark_lost adds '!' and token to T beside token's tombstone, left by
-- q_leave in the same run: a multi-key lock's release (or leave) found
-- the key not holding token. A second run of that release (its reply was
-- lost, and it was sent again) then tells the key it released from the
-- key it had lost (multi_release.lua), as the tombstone alone could not.
local function q_mark_lost(qs, token)
  redis.call('ZADD', qs.t, q_now(qs) + Q_DEAD_MS, '!' .. token)
end

-- q_mark_stolen adds '^' and v to T, for Q_DEAD_MS (as q_tomb): an
-- operator's steal (release.lua's 'force') released the key while it held
-- v. The holder's own release of token v that then finds the key not
-- holding it answers that the hold was taken (q_release: -3), however late
-- its reply reaches the holder, rather than leave it to read a key gone or
-- another's as its own expiry after it let go. If T is another program's
-- key (not a sorted set), no mark is left, and the steal stands.
local function q_mark_stolen(qs, v)
  if is_err(redis.pcall('ZADD', qs.t, q_now(qs) + Q_DEAD_MS, '^' .. v)) then
    return
  end
  redis.call('PEXPIRE', qs.t, Q_DEAD_MS)
end

-- q_released_here reports whether T holds token's tombstone without the
-- lost mark: an earlier run of a multi-key release released that key (see
-- q_mark_lost).
-- Its second result, in the same read: T holds the mark of an operator's
-- steal of token (q_mark_stolen).
local function q_released_here(qs, token)
  local r = redis.pcall('ZMSCORE', qs.t, token, '!' .. token, '^' .. token)
  if is_err(r) then
    return false, false
  end
  return r[1] ~= false and r[2] == false, r[3] ~= false
end

-- q_rereleased answers a release of token that found the key not holding
-- it but token's release tombstone there: an earlier run of the release
-- ran (its reply was lost, and the call was sent again). It writes the
-- tombstone again (1 ms shorter: a write that changes nothing would not
-- count), so that this run writes too: a WAIT after it (MinReplicas) then
-- waits for the replicas to reach this write, and so the earlier run's,
-- on whatever connection that ran. Without a write, WAIT waits for the
-- last write of its own connection only (Redis and Valkey alike): a
-- connection older than the earlier run confirms at once, while a
-- replica may lack its delete.
local function q_rereleased(qs, token)
  redis.call('ZINCRBY', qs.t, -1, token)
end

-- q_handoff passes the exclusive key k, which the caller just gave up, to
-- the first live waiter of Q (q_serve): k holds that waiter's token for
-- pickup ms (the waiter's next acquire confirms it), the waiter's lease is
-- marked handed, and the waiter is told on its channel. Dead waiters are
-- skipped. With no live waiter, k is deleted and 'released' is published
-- on wake. Returns false, having written nothing, if Q is not a list.
-- head, lease: Q's head popped by the caller, and its lease (q_serve).
local function q_handoff(k, qs, pickup, wake, head, lease)
  local r = q_serve(qs, nil, false, function(m)
    redis.call('SET', k, m, 'PX', pickup)
    return 'hand', true
  end, head, lease)
  if r == nil then
    return false
  end
  if not r then
    redis.call('DEL', k)
    pcall_publish(wake, 'released')
  end
  return true
end

-- q_unpop puts m, the head q_release popped, back at Q's head: Q's order
-- is as it was. If the pop had emptied Q (Redis deleted it, and its TTL
-- with it), Q gets m's lease's remaining time back: a queue lives at
-- least as long as its waiters' leases (q_join), and m is its only one;
-- if m is dead (no lease, or one that ended), Q stays gone, as the next
-- walk of Q would have left it.
local function q_unpop(qs, m)
  local _, e = q_lease(qs, redis.call('HGET', qs.w, m))
  if not e then
    redis.call('LPUSHX', qs.q, m)
    return
  end
  if redis.call('LPUSH', qs.q, m) == 1 then
    redis.call('PEXPIRE', qs.q, e - q_now(qs))
  end
end

-- q_release releases the exclusive key k for its holder token: it hands k
-- to Q's first live waiter or frees it (q_handoff), and leaves token's
-- release tombstone (q_released). A release of token that finds the key
-- not holding it but the tombstone there already ran (its reply was lost
-- and the Redis client sent it again): it answers 1, not a loss, and
-- writes the tombstone again (q_rereleased). One that finds neither but
-- the mark of an operator's steal of token (q_mark_stolen) answers -3.
-- Returns release.lua's replies: 1 released, 0 gone, -1 another owner's
-- token, -2 k is not a string, Q not a list or T not a sorted set
-- (nothing written), -3 stolen.
--
-- Q's head is popped first, and put back (q_unpop) if k turns out not to
-- be ours.
local function q_release(k, qs, token, wake, pickup)
  local m = redis.pcall('LPOP', qs.q)
  local code = owner_check(k, token)
  if code ~= 1 then
    if m and not is_err(m) then
      q_unpop(qs, m)
    end
    if code ~= -2 then
      -- the release's tombstone, and the steal's mark, in one read
      local r = redis.pcall('ZMSCORE', qs.t, token, '^' .. token)
      if is_err(r) then
        return -2
      elseif r[1] then
        q_rereleased(qs, token)
        return 1
      elseif r[2] then
        return -3
      end
    end
    return code
  end
  if is_err(m) then
    return -2 -- Q is not a list: nothing popped, nothing written
  end
  q_handoff(k, qs, pickup, wake, m)
  q_released(qs, token)
  return 1
end
