-- publish.lua: the one way dlock's scripts publish.

-- pcall_publish publishes msg on channel ch by redis.pcall, and ignores
-- a refusal: a Redis user whose ACL does not grant the channel (Redis 7's
-- acl-pubsub-default resetchannels, no &pattern) or the command itself
-- loses the wake-up only. Redis does not roll back a script whose command
-- fails, so a refused redis.call would end the script after its writes,
-- with an error reply that says nothing was done.
--
-- A ch starting with '#' names a shard channel: msg goes by SPUBLISH on
-- the rest of ch (a Client on Redis Cluster passes it so, on a channel in
-- the slot of the script's keys: the message stays on that shard). No
-- dlock channel starts with '#' (a prefix has none), so any other ch is a
-- plain channel, PUBLISHed.
local function pcall_publish(ch, msg)
  if string.byte(ch, 1) == 35 then -- '#'
    redis.pcall('SPUBLISH', string.sub(ch, 2), msg)
  else
    redis.pcall('PUBLISH', ch, msg)
  end
end
