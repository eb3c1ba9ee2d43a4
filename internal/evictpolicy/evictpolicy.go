// Package evictpolicy reads a Redis server's maxmemory-policy, for the
// start-up checks of package dlock and its companions (redlock, fenced):
// with any policy but noeviction, Redis may delete a lock key, a
// semaphore's permits or a guard record under memory pressure, and every
// guarantee built on them is gone.
package evictpolicy

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Safe is the one policy under which Redis never evicts a key.
const Safe = "noeviction"

// ErrUnreadable: the server refused both CONFIG GET maxmemory-policy and
// INFO memory (an ACL, a renamed command, a managed Redis), so the policy
// is unknown.
var ErrUnreadable = errors.New("maxmemory-policy unreadable (CONFIG GET and INFO memory both refused)")

// Read returns n's maxmemory-policy: CONFIG GET, or the maxmemory_policy
// field of INFO memory when CONFIG is refused or renamed. An error reply
// to both is ErrUnreadable (joined with the replies); any other error
// (network, timeout, ctx) is returned as it is: the policy may be
// readable later.
func Read(ctx context.Context, n redis.Cmdable) (string, error) {
	m, err := n.ConfigGet(ctx, "maxmemory-policy").Result()
	if p := m["maxmemory-policy"]; err == nil && p != "" {
		return p, nil
	}
	if err != nil && !isReply(err) {
		return "", err
	}
	info, ierr := n.Info(ctx, "memory").Result()
	if ierr != nil && !isReply(ierr) {
		return "", ierr
	}
	if p := field(info, "maxmemory_policy"); ierr == nil && p != "" {
		return p, nil
	}
	return "", errors.Join(ErrUnreadable, err, ierr)
}

// Evicts reports whether policy lets Redis delete keys under memory
// pressure. maxmemory 0 does not make an evicting policy safe: a later
// CONFIG SET maxmemory turns eviction on without a restart.
func Evicts(policy string) bool { return policy != Safe }

// isReply reports whether err is an error reply from the server (the
// command ran and was refused), not a failure to reach it.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// field returns the value of name in an INFO reply.
func field(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}
