-- multi_release.lua: release every key of a multi-key lock (in one slot)
-- that holds our token, handing each to its first live waiter; also take
-- the token out of every key's queue (a waiter that gives up, or holds
-- some keys and waits for the next). Uses lualib/queue.lua (prepended).
--
-- KEYS     quadruples: KEYS[4i-3] a lock key, KEYS[4i-2] its wait queue,
--          KEYS[4i-1] its waiters' leases, KEYS[4i] its tombstones
-- ARGV[1]  the caller's token
-- ARGV[2]  the pickup time in ms of a hand-off
-- ARGV[2+i] key i's wake-up channel ('released' when freed, nobody queued)
-- ARGV[3+n] (n = #KEYS/4) 'r': the roll-back of an attempt whose token
--           goes on: just take the token out of every queue; otherwise
--           ('0' a release, '1' a waiter leaving or an abandoned acquire)
--           the token is done: leave a tombstone in every queue
--           (lualib/queue.lua), Q_LOST in the queue of a key that did not
--           hold the token (q_mark_lost), and count a key that no longer
--           holds the token but already had the Q_DEAD tombstone as
--           released (this release ran before and lost its reply; it was
--           sent again); a key whose Q_LOST tombstone is there was not
--           ours when the earlier run came: its verdict stands. A key
--           not holding the token whose tombstones hold the mark of an
--           operator's steal of it (q_mark_stolen) answers -3
--
-- Returns  1  every key held our token (all released)
--          0  some key was gone (the others were released)
--         -1  some key held another owner's token (left untouched)
--         -2  some key was not a string, or its queue not a list (left
--             untouched)
--         -3  (a release) an operator's steal released some key while it
--             held the token: a loss, also when the reply comes after
--             the lock's deadline
-- The worst outcome wins: -2, then -3, then -1, then 0.
local token, code = ARGV[1], 1
local done = ARGV[3 + #KEYS / 4] ~= 'r'
local leave = done and q_leave or q_drop
local rank = {[1] = 0, [0] = 1, [-1] = 2, [-3] = 3, [-2] = 4}
local function worse(c)
  if rank[c] > rank[code] then
    code = c
  end
end
for i = 1, #KEYS / 4 do
  local k, q = KEYS[4 * i - 3], q_keys(KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i])
  local v = redis.pcall('GET', k)
  local ran, stolen = false, false
  if done then
    ran, stolen = q_released_here(q, token)
  end
  if is_err(v) or not leave(q, token) then
    worse(-2)
  elseif v == token then
    q_handoff(k, q, ARGV[2], ARGV[2 + i])
  elseif ran then
    -- released by an earlier run of this call
  else
    if done then
      q_mark_lost(q, token)
    end
    if stolen then
      worse(-3)
    else
      worse(v and -1 or 0)
    end
  end
end
return code
