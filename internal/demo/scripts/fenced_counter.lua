-- fenced_counter.lua: the resource the leaders of the election demo write
-- to. It counts a write only for a term at least the newest it has seen,
-- and records the writer of each term: a second writer in one term is
-- counted as a conflict.
--
-- KEYS[1]  hash: term (newest seen), n (writes), refused, conflicts
-- KEYS[2]  hash: term -> the writer of that term
-- ARGV[1]  the writer's term
-- ARGV[2]  the writer's id
-- Returns  1 if the write was counted, 0 if refused (an older term)
local term = tonumber(ARGV[1])
local cur = tonumber(redis.call('HGET', KEYS[1], 'term') or '0')
if term < cur then
  redis.call('HINCRBY', KEYS[1], 'refused', 1)
  return 0
end
redis.call('HSET', KEYS[1], 'term', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'n', 1)
local who = redis.call('HGET', KEYS[2], ARGV[1])
if who and who ~= ARGV[2] then
  redis.call('HINCRBY', KEYS[1], 'conflicts', 1)
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
