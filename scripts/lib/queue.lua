-- lib/queue.lua: the FIFO wait queue every lock script shares (prepended).
--
-- A queue Q is a list of waiter tokens, oldest first. A live waiter also
-- has a lease key Q..':'..token (same Cluster slot: it carries Q's hash
-- tag) that expires unless the waiter refreshes it. The lease holds the
-- waiter's payload: the pub/sub channel its hand-off is published on,
-- optionally followed by '{' and what it asks for: 'r' for a shared
-- (read) hold, or a number of semaphore permits. Nothing after the channel
-- means an exclusive lock. Channels never contain '{' (the Client's prefix
-- cannot), so the split is unambiguous.

-- q_parse splits a payload into its channel and its request.
local function q_parse(p)
  local i = string.find(p, '{', 1, true)
  if not i then
    return p, ''
  end
  return string.sub(p, 1, i - 1), string.sub(p, i + 1)
end

-- q_ahead reports whether a live waiter other than token is first in q.
-- Dead waiters at the head are dropped; token itself, if first, is popped
-- (the caller is about to take what it waited for).
local function q_ahead(q, token)
  local head = redis.call('LINDEX', q, 0)
  while head do
    if head == token then
      redis.call('LPOP', q)
      return false
    end
    if redis.call('EXISTS', q .. ':' .. head) == 1 then
      return true
    end
    redis.call('LPOP', q)
    head = redis.call('LINDEX', q, 0)
  end
  return false
end

-- q_join refreshes token's lease in q to lease ms with payload p, and puts
-- token at the tail if it is not queued: always on a first attempt
-- (first), else only if its lease had lapsed and it is not in the list.
local function q_join(q, token, p, lease, first)
  local had = redis.call('SET', q .. ':' .. token, p, 'PX', lease, 'GET')
  if first or (not had and not redis.call('LPOS', q, token)) then
    redis.call('RPUSH', q, token)
  end
end

-- q_leave takes token out of q and deletes its lease.
local function q_leave(q, token)
  redis.call('LREM', q, 0, token)
  redis.call('DEL', q .. ':' .. token)
end

-- q_handoff passes the exclusive key k, which the caller just gave up, to
-- the first live waiter of q: k holds that waiter's token for pickup ms
-- (the waiter's next acquire confirms it) and the token is published on
-- the waiter's channel. Dead waiters are skipped. With no live waiter, k
-- is deleted and 'released' is published on wake.
local function q_handoff(k, q, pickup, wake)
  while true do
    local nxt = redis.call('LPOP', q)
    if not nxt then
      break
    end
    local p = redis.call('GET', q .. ':' .. nxt)
    if p then
      redis.call('SET', k, nxt, 'PX', pickup)
      redis.call('PUBLISH', (q_parse(p)), nxt)
      return
    end
  end
  redis.call('DEL', k)
  redis.call('PUBLISH', wake, 'released')
end
