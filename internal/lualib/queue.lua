-- queue.lua: the FIFO wait queue every lock script shares (prepended).
--
-- A queue Q is a list of waiter tokens, oldest first. A live waiter also
-- has a lease key Q..':'..token (same Cluster slot: it carries Q's hash
-- tag) that expires unless the waiter refreshes it. The lease holds the
-- waiter's payload: the pub/sub channel its hand-off is published on,
-- optionally followed by '{' and what it asks for: 'r' for a shared
-- (read) hold, or a number of semaphore permits. Nothing after the channel
-- means an exclusive lock. Channels never contain '{' (the Client's prefix
-- cannot), so the split is unambiguous. Q itself expires with the longest
-- lease of its waiters (every join raises its TTL to the joiner's lease).
--
-- The pickup state. A hand-off takes the waiter out of Q, gives it what it
-- waited for for the pickup time only (the lock key holding its token, or
-- its permits or read handle scored with the pickup's end), tells it on
-- its channel (q_notify: SHA1 of its token, never the token), and marks
-- its lease key handed: '!' in front of the payload, TTL unchanged (q_serve
-- does all of it but the hold, for every hand-off). The waiter's next
-- acquire confirms (its grant deletes the lease key: a granted waiter keeps
-- no lease). If that acquire
-- comes after the pickup lapsed (a GC pause, a stalled CPU), it finds the
-- mark and puts the waiter back at the head of Q (q_join): it is the next
-- one served. A waiter that died leaves only the marked lease, which
-- expires with its lease; nobody waits for it.

-- The tombstone. A waiter that leaves for good (q_leave: it gave up, or
-- the engine withdraws an acquire whose reply was lost or came too late)
-- leaves Q_DEAD in place of its lease for Q_DEAD_MS. Every acquire script
-- refuses a token with a tombstone (q_dead) before it touches anything,
-- so an acquire of a given-up token that lands after its withdrawal
-- (delayed in the network, or behind a stalled client) can neither take
-- the key nor rejoin the queue: the token is never granted again, and
-- nothing is left held by nobody. The engine never reuses a withdrawn
-- token. A multi-key lock's release, or leave, that finds a key not
-- holding its token leaves Q_LOST in that key's queue instead (see
-- q_mark_lost): a tombstone too. No payload equals either (a payload
-- starts with a channel name, or '!' and a channel name).
local Q_DEAD, Q_LOST, Q_DEAD_MS = '~', '~-', 10000

-- q_is_dead reports whether v, the value of a lease key, is a tombstone.
local function q_is_dead(v)
  return v == Q_DEAD or v == Q_LOST
end

-- q_dead reports whether token left q for good within the last Q_DEAD_MS.
local function q_dead(q, token)
  return q_is_dead(redis.pcall('GET', q .. ':' .. token))
end

-- q_dead_fence is q_dead(q, token) and fence_read(f) in one read (MGET),
-- for the acquire scripts: it returns true if token is dead, else false
-- and f's value (nil: not a counter; see fence_mget). With k, the lock
-- key is read too, and its value is the third result: nil if it is
-- missing or not a string (MGET cannot tell those apart: the caller reads
-- it again, type-checked, when it needs to know).
local function q_dead_fence(q, token, f, k)
  local r
  if k then
    r = redis.call('MGET', q .. ':' .. token, f, k)
  else
    r = redis.call('MGET', q .. ':' .. token, f)
  end
  if q_is_dead(r[1]) then
    return true
  end
  return false, fence_mget(f, r[2]), r[3] or nil
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

-- q_ok reports whether q is a list or does not exist (else it is another
-- program's key under our name: the caller writes nothing).
local function q_ok(q)
  return not is_err(redis.pcall('LLEN', q))
end

-- q_serve walks q from its head and serves its waiters in order, as many
-- as fit. A dead waiter (no lease, or a tombstone) is dropped. For each
-- live one, serve(m, req, ch) decides, req being what m asks for and ch
-- its channel (q_parse); for self, the caller's own token, serve(self,
-- nil) is asked without
-- reading its lease (the caller knows what it asks for), and may answer
-- only 'wait' or 'pop' (self has no lease or channel read here to mark or
-- tell; a caller that must refuse itself does so before the walk, as
-- semaphore_acquire does for a request above the limit):
--   'wait'  m does not fit: it stays at the head, and the walk ends
--   'hand'  serve gave m its hold for the pickup time: m leaves q, its
--           lease is marked handed (the pickup state) and it is told on
--           its channel (q_notify)
--   'deny'  m can never be served: it leaves q, its lease goes, and it is
--           told (its next acquire fails)
--   'pop'   m leaves q, nothing else (self, served by the caller)
-- A second result true ends the walk after m. peek: serve may answer
-- 'wait', so each head is read (LINDEX) before it is popped; without,
-- every live waiter is served, and heads are popped at once (LPOP).
-- Returns nil, having written nothing, if q is not a list; false if q ran
-- out; else the answer that ended the walk. head, lease (without peek):
-- the caller popped q's head already, head (false: q was empty), and
-- read its lease key (false: none; see q_release).
local function q_serve(q, self, peek, serve, head, lease)
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
    local l, p, ch, req = q .. ':' .. m, lease
    lease = nil
    local act, stop = 'pop', false
    if m == self then
      act, stop = serve(m, nil)
    else
      if p == nil then
        p = redis.call('GET', l)
      end
      if p and not q_is_dead(p) then
        ch, req = q_parse(p)
        act, stop = serve(m, req, ch)
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
        redis.call('SET', l, '!' .. p, 'KEEPTTL')
      end
      q_notify(ch, m)
    elseif act == 'deny' then
      redis.call('DEL', l)
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

-- q_ahead reports whether a live waiter other than token is first in q.
-- Dead waiters at the head are dropped; token itself, if first, is popped
-- (the caller is about to take what it waited for). Returns nil, having
-- written nothing, if q is not a list.
local function q_ahead(q, token)
  local r = q_serve(q, token, true, function(m)
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

-- q_empty reports whether nobody is queued in q (dead waiters count: see
-- q_ahead). Returns nil if q is not a list.
local function q_empty(q)
  local head = redis.pcall('LINDEX', q, 0)
  if is_err(head) then
    return nil
  end
  return not head
end

-- q_nudge tells the first live waiter of q, on its channel, to try again
-- now, handing it nothing (dead waiters at the head are dropped): its own
-- acquire then serves the queue with what only the waiters know (a
-- semaphore's limit). To the waiter it looks like a hand-off whose
-- permits were not there. Returns nil, having written nothing, if q is not
-- a list.
local function q_nudge(q)
  return q_serve(q, nil, true, function(m, req, ch)
    q_notify(ch, m)
    return 'wait'
  end)
end

-- q_may_take reports whether token may take a free key now: always when
-- barging, else when no live waiter is ahead of it in q (see q_ahead).
-- Returns nil, having written nothing, if q is not a list.
local function q_may_take(q, token, mode)
  if mode == 'barge' then
    return true
  end
  local ahead = q_ahead(q, token)
  if ahead == nil then
    return nil
  end
  return not ahead
end

-- q_keep makes q live at least ms more: its TTL is raised, never lowered
-- (GT). created: the caller's push just created q (the push answered 1),
-- so it has no TTL yet, and gets ms. One command either way: a list we
-- created always has a TTL, so PEXPIRE GT need not read it first.
local function q_keep(q, ms, created)
  if created then
    redis.call('PEXPIRE', q, ms)
  else
    redis.call('PEXPIRE', q, ms, 'GT')
  end
end

-- q_join refreshes token's lease in q to lease ms with payload p, and
-- keeps token queued: at the tail on a first attempt (first); else back
-- at the head if its hand-off lapsed (the lease is marked handed), or at
-- the tail if its lease had lapsed and it is no longer in the list. A
-- retry (not first) needs a caller that checked that q is a list or
-- missing (q_ok, or the LINDEX of q_empty or q_ahead, in the same script
-- run): it does not read q's type again. A first attempt checks it
-- itself, with its push (the first write): it returns false, having
-- written nothing, if q is not a list, so an acquire that found the key
-- held reads nothing of q before it joins. Returns true otherwise.
local function q_join(q, token, p, lease, first)
  local n = 0
  if first then
    n = redis.pcall('RPUSH', q, token)
    if is_err(n) then
      return false
    end
    redis.call('SET', q .. ':' .. token, p, 'PX', lease)
  else
    local had = redis.call('SET', q .. ':' .. token, p, 'PX', lease, 'GET')
    if had and string.byte(had, 1) == 33 then
      if not redis.call('LPOS', q, token) then
        n = redis.call('LPUSH', q, token)
      end
    elseif not had and not redis.call('LPOS', q, token) then
      n = redis.call('RPUSH', q, token)
    end
  end
  q_keep(q, lease, n == 1)
  return true
end

-- q_granted ends token's wait in q: it got what it waited for, so its
-- lease key goes (it is not in the list any more).
local function q_granted(q, token)
  redis.call('DEL', q .. ':' .. token)
end

-- q_drop takes token out of q and deletes its lease (no tombstone: the
-- caller may use token again). Returns false, having written nothing, if
-- q is not a list.
local function q_drop(q, token)
  if is_err(redis.pcall('LREM', q, 0, token)) then
    return false
  end
  redis.call('DEL', q .. ':' .. token)
  return true
end

-- q_leave takes token out of q for good: its lease is replaced by a
-- tombstone. Returns false, having written nothing, if q is not a list.
local function q_leave(q, token)
  if is_err(redis.pcall('LREM', q, 0, token)) then
    return false
  end
  redis.call('SET', q .. ':' .. token, Q_DEAD, 'PX', Q_DEAD_MS)
  return true
end

-- q_released marks that token's holder released its hold: the same
-- tombstone as q_leave's, so no acquire grants token again, and a release
-- of token that finds nothing (because this one ran and its reply was lost,
-- and the Redis client sent it again on a new connection) can tell that
-- apart from a loss with q_dead. One SET per release.
local function q_released(q, token)
  redis.call('SET', q .. ':' .. token, Q_DEAD, 'PX', Q_DEAD_MS)
end

-- q_mark_lost turns token's tombstone in q, left by q_leave, into Q_LOST:
-- a multi-key lock's release (or leave) found the key not holding token.
-- A second run of that release (its reply was lost, and it was sent
-- again) then tells the key it released from the key it had lost
-- (multi_release.lua), as Q_DEAD alone could not: it is left in every
-- queue of the lock.
local function q_mark_lost(q, token)
  redis.call('SET', q .. ':' .. token, Q_LOST, 'PX', Q_DEAD_MS)
end

-- q_released_here reports whether q holds token's Q_DEAD tombstone, not
-- Q_LOST: an earlier run of a multi-key release released that key (see
-- q_mark_lost).
local function q_released_here(q, token)
  return redis.pcall('GET', q .. ':' .. token) == Q_DEAD
end

-- q_rereleased answers a release of token that found the key not holding
-- it but token's release tombstone there: an earlier run of the release
-- ran (its reply was lost, and the call was sent again). It writes the
-- tombstone again, with its value and TTL unchanged, so that this run
-- writes too: a WAIT after it (MinReplicas) then waits for the replicas to
-- reach this write, and so the earlier run's, on whatever connection that
-- ran. Without a write, WAIT waits for the last write of its own
-- connection only (Redis 7.2 and later, Valkey): a connection older than
-- the earlier run confirms at once, while a replica may lack its delete.
local function q_rereleased(q, token)
  redis.call('SET', q .. ':' .. token, Q_DEAD, 'KEEPTTL')
end

-- q_handoff passes the exclusive key k, which the caller just gave up, to
-- the first live waiter of q (q_serve): k holds that waiter's token for
-- pickup ms (the waiter's next acquire confirms it), the waiter's lease is
-- marked handed, and the waiter is told on its channel. Dead waiters are
-- skipped. With no live waiter, k is deleted and 'released' is published
-- on wake. Returns false, having written nothing, if q is not a list.
-- head, lease: q's head popped by the caller, and its lease (q_serve).
local function q_handoff(k, q, pickup, wake, head, lease)
  local r = q_serve(q, nil, false, function(m)
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

-- q_unpop puts m, the head q_release popped, back at q's head, with p
-- its lease as read then: q's order is as it was. If the pop had emptied
-- q (Redis deleted it, and its TTL with it), q gets m's lease's TTL back:
-- a queue lives at least as long as its waiters' leases (q_join), and m
-- is its only one; if m is dead (no lease, or a tombstone), q stays gone,
-- as the next walk of q would have left it.
local function q_unpop(q, m, p)
  if not p or q_is_dead(p) then
    redis.call('LPUSHX', q, m)
    return
  end
  if redis.call('LPUSH', q, m) == 1 then
    local t = redis.call('PTTL', q .. ':' .. m)
    if t > 0 then
      redis.call('PEXPIRE', q, t)
    end
  end
end

-- q_release releases the exclusive key k for its holder token: it hands k
-- to q's first live waiter or frees it (q_handoff), and leaves token's
-- release tombstone (q_released). A release of token that finds the key
-- not holding it but the tombstone there already ran (its reply was lost
-- and the Redis client sent it again): it answers 1, not a loss, and
-- writes the tombstone again (q_rereleased). Returns
-- release.lua's replies: 1 released, 0 gone, -1 another owner's token,
-- -2 k is not a string or q not a list (nothing written).
--
-- The hand-off reads k and the next waiter's lease in one MGET: q's head
-- is popped first, and put back (q_unpop) if k turns out not to be ours.
-- MGET answers nil for a key of another type as for a missing one, so k
-- is read again (GET, type-checked) only then.
local function q_release(k, q, token, wake, pickup)
  local m = redis.pcall('LPOP', q)
  if is_err(m) then
    -- q is not a list: nothing popped, nothing to write.
    local code = owner_check(k, token)
    if code ~= 1 and code ~= -2 and q_dead(q, token) then
      q_rereleased(q, token)
      return 1
    end
    return code == 1 and -2 or code
  end
  local v, p = false, nil
  if m then
    local r = redis.call('MGET', k, q .. ':' .. m)
    v, p = r[1], r[2]
  end
  if not v then
    v = redis.pcall('GET', k)
  end
  local code = owner_of(v, token)
  if code ~= 1 then
    if m then
      q_unpop(q, m, p)
    end
    if code ~= -2 and q_dead(q, token) then
      q_rereleased(q, token)
      return 1
    end
    return code
  end
  q_handoff(k, q, pickup, wake, m, p)
  q_released(q, token)
  return 1
end
