// Package evictpolicy reads a Redis server's maxmemory-policy, for the
// start-up checks of package dlock and its companions (redlock, fenced):
// with any policy but noeviction, Redis may delete a lock key, a
// semaphore's permits or a guard record under memory pressure, and every
// guarantee built on them is gone. A Client's Gate (gate.go) holds its
// verdict on its masters, read again before a grant once it is stale.
package evictpolicy

import (
	"context"
	"errors"
	"strings"
	"sync"

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

// Node is one master's policy, or why it is unknown (Read's error).
type Node struct {
	Addr, Policy string
	Err          error
}

// ReadAll reads the policy of every master of rdb: each Cluster master
// and each Ring shard (concurrently), or rdb itself. A topology that
// cannot be listed adds a Node with the error.
func ReadAll(ctx context.Context, rdb redis.UniversalClient) []Node {
	var mu sync.Mutex
	var got []Node
	read := func(ctx context.Context, n *redis.Client) error {
		p, err := Read(ctx, n)
		mu.Lock()
		defer mu.Unlock()
		got = append(got, Node{Addr: Name(n), Policy: p, Err: err})
		return nil
	}
	var err error
	switch r := rdb.(type) {
	case *redis.ClusterClient:
		err = r.ForEachMaster(ctx, read)
	case *redis.Ring:
		err = r.ForEachShard(ctx, read)
	case *redis.Client:
		err = read(ctx, r)
	default:
		p, perr := Read(ctx, rdb)
		got = append(got, Node{Addr: "the server", Policy: p, Err: perr})
	}
	if err != nil {
		got = append(got, Node{Addr: "the topology", Err: err})
	}
	return got
}

// Name names n in messages: its address, or what a Sentinel failover
// client stands for.
func Name(n *redis.Client) string {
	if a := n.Options().Addr; a != "FailoverClient" {
		return a
	}
	return "the Sentinel master"
}

// Evicting returns the masters among nodes whose policy evicts, each as
// "address has policy".
func Evicting(nodes []Node) []string {
	var out []string
	for _, n := range nodes {
		if n.Err == nil && Evicts(n.Policy) {
			out = append(out, n.Addr+" has "+n.Policy)
		}
	}
	return out
}

// Unreached returns, as one line, why the masters among nodes that could
// not be asked did not answer (nil if all did); it wraps the first error.
// A refused policy (ErrUnreadable) is no such failure.
func Unreached(nodes []Node) error {
	var e *unreachedError
	for _, n := range nodes {
		if n.Err == nil || errors.Is(n.Err, ErrUnreadable) {
			continue
		}
		line := n.Addr + ": " + strings.ReplaceAll(n.Err.Error(), "\n", "; ")
		if e == nil {
			e = &unreachedError{msg: line, first: n.Err}
		} else {
			e.msg += "; " + line
		}
	}
	if e == nil {
		return nil
	}
	return e
}

// unreachedError is Unreached's error: one line for every master, the
// first master's error for errors.Is and errors.As.
type unreachedError struct {
	msg   string
	first error
}

func (e *unreachedError) Error() string { return e.msg }
func (e *unreachedError) Unwrap() error { return e.first }
