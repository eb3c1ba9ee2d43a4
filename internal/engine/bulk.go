package engine

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/dlock-go/dlock/internal/rexec"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// Bulk calls. The watchdog's renewals (of BulkRenewer protocols) and
// Close's releases (of BulkReleaser protocols: the token lock's, through
// the bulk script it names) are sent as one script call per group of locks that one
// call may touch (one server: all of them; a Cluster: one slot; a Ring:
// one shard), up to bulkMax locks each, rather than one EVALSHA per lock:
// Redis runs one script instead of hundreds, and the client builds and
// reads one command. Each lock still gets its own reply, the same one its
// single call would have got, so the engine applies it the same way.
// Calls of other protocols (other primitives, multi-key locks) and
// groups of one go out as they are, in the same pipeline.
//
// A bulk renewal (extend_many.lua) carries only each lock's key and token:
// the TTLs are the call's (renewals are grouped by TTL, and by whether
// they push the fence counter out), and the reply names only the locks not
// extended. Arguments are most of what such a call costs Redis (each
// becomes a Lua string), and reply elements what it costs the client.
var extendManyBody = scripts.Body(scripts.ExtendMany)

// bulkMax caps the locks of one bulk call. Redis runs a script without
// interruption: at a few microseconds per lock, a call of bulkMax keeps
// other clients waiting well under a millisecond.
const bulkMax = 64

// reply is one call's integer reply, or its error.
type reply struct {
	code int64
	err  error
}

// errBulkReply: a bulk call answered with something other than its
// script's reply for its locks. Not a Redis error reply, so the engine
// treats it as a reply it could not read (the call may have run).
var errBulkReply = errors.New("dlock: unexpected reply from a bulk script")

// bulkForm is how a call merges with others like it into one bulk call
// (see BulkReleaser): the bulk script, and how many of the call's
// arguments it takes per lock, after all of its keys. The zero bulkForm:
// the call goes out alone.
type bulkForm struct {
	s    *redis.Script
	args int
}

// releaseForm returns the bulk form of p's release calls: the zero form
// unless p is a BulkReleaser.
func releaseForm(p Protocol) bulkForm {
	if b, ok := p.(BulkReleaser); ok {
		s, n := b.BulkRelease()
		return bulkForm{s, n}
	}
	return bulkForm{}
}

// bulkRenewal is one lease's part of an extend_many call: what its
// extend.lua call would have carried.
type bulkRenewal struct {
	lock, fence, token string
	ttl, fttl          int64 // milliseconds; fttl 0: leave the counter
	// lockArg and tokenArg are lock and token as command arguments, boxed
	// by the lease once rather than at every renewal; nil: box them here.
	lockArg, tokenArg any
}

// arg returns s as a command argument: boxed, unless it is already.
func arg(boxed any, s string) any {
	if boxed != nil {
		return boxed
	}
	return s
}

// runCalls runs calls, each with an integer reply, and renewals in one
// pipeline (split per Cluster node or Ring shard by go-redis), merging
// the calls whose bulk form in forms (nil: none has one) names a bulk
// script, and returns each call's and each renewal's reply in order.
func (e *Engine) runCalls(ctx context.Context, calls []protocol.Call, forms []bulkForm, renewals []bulkRenewal) (callReplies, renewalReplies []reply) {
	type groupKey struct {
		form      bulkForm // calls
		renew     bool     // renewals (extend_many)
		at        string
		ttl, fttl int64 // renewals
	}
	var (
		sent   []protocol.Call
		raw    []rexec.Raw        // raw[j]: sent[j] as built arguments (bulk renewals), if any
		owners [][]int            // owners[j]: the calls (or renewals) sent[j] answers for
		kind   []int8             // sent[j]: 0 a call, 1 a bulk release, 2 a bulk renewal
		groups map[groupKey][]int // by Cluster slot or Ring shard
		order  []groupKey
		plain  [][]int // plain[n]: order[n]'s calls, if on one server
	)
	group := func(k groupKey, i int) {
		if k.at == "" { // one server: one group per script and TTLs, no map
			if j := slices.Index(order, k); j >= 0 {
				plain[j] = append(plain[j], i)
			} else {
				order, plain = append(order, k), append(plain, []int{i})
			}
			return
		}
		if groups == nil {
			groups = make(map[groupKey][]int)
		}
		if _, ok := groups[k]; !ok {
			order, plain = append(order, k), append(plain, nil)
		}
		groups[k] = append(groups[k], i)
	}
	for i, call := range calls {
		if forms == nil || forms[i].s == nil {
			sent, owners, kind = append(sent, call), append(owners, []int{i}), append(kind, 0)
			continue
		}
		group(groupKey{form: forms[i], at: e.groupOf(call.Keys[0])}, i)
	}
	for i, r := range renewals {
		group(groupKey{renew: true, at: e.groupOf(r.lock), ttl: r.ttl, fttl: r.fttl}, i)
	}
	for n, k := range order {
		ids := plain[n]
		if k.at != "" {
			ids = groups[k]
		}
		if !k.renew && len(ids) == 1 {
			sent, owners, kind = append(sent, calls[ids[0]]), append(owners, ids), append(kind, 0)
			continue
		}
		for len(ids) > 0 {
			part := ids[:min(len(ids), bulkMax)]
			ids = ids[len(part):]
			if k.renew {
				if raw == nil {
					raw = make([]rexec.Raw, len(sent), len(sent)+(len(renewals)+bulkMax-1)/bulkMax)
				}
				raw = append(raw[:len(sent)], bulkRenewCall(renewals, part, k.ttl, k.fttl))
				sent, owners, kind = append(sent, protocol.Call{}), append(owners, part), append(kind, 2)
				continue
			}
			b := protocol.Call{Script: k.form.s, Keys: make([]string, 0, len(calls[part[0]].Keys)*len(part)),
				Args: make([]any, 0, k.form.args*len(part))}
			for _, i := range part {
				b.Keys = append(b.Keys, calls[i].Keys...)
				b.Args = append(b.Args, calls[i].Args[:k.form.args]...)
			}
			sent, owners, kind = append(sent, b), append(owners, part), append(kind, 1)
		}
	}
	callReplies, renewalReplies = make([]reply, len(calls)), make([]reply, len(renewals))
	if raw != nil {
		raw = append(raw, make([]rexec.Raw, len(sent)-len(raw))...)
	}
	for j, cmd := range e.exec.Send(ctx, sent, raw) {
		if rexec.IsRefusal(cmd.Err()) {
			// Not retried here, in the batch: a refused renewal is
			// retried by the watchdog, within its lease's deadline, and a
			// refused release of Close by itself (see sentRelease).
			e.exec.Refused(1)
		}
		switch kind[j] {
		case 0:
			code, err := cmd.Int64()
			callReplies[owners[j][0]] = reply{code, err}
		case 1:
			codes, err := cmd.Int64Slice()
			if err == nil && len(codes) != len(owners[j]) {
				err = errBulkReply
			}
			for n, i := range owners[j] {
				if err != nil {
					callReplies[i] = reply{0, err}
				} else {
					callReplies[i] = reply{codes[n], nil}
				}
			}
		case 2:
			bulkRenewReplies(cmd, owners[j], renewalReplies)
		}
	}
	return callReplies, renewalReplies
}

// bulkRenewCall is the extend_many call of renewals[part], which share
// their TTLs and their group, as the arguments of its EVALSHA: built
// directly, each lease's key and token boxed once by the lease, rather
// than as a protocol.Call that go-redis copies into a new slice, boxing
// every key again.
func bulkRenewCall(renewals []bulkRenewal, part []int, ttl, fttl int64) rexec.Raw {
	nk := len(part)
	if fttl != 0 {
		nk *= 2
	}
	args := make([]any, 0, 3+nk+2+len(part))
	args = append(args, "evalsha", scripts.ExtendMany.Hash(), nk)
	for _, i := range part {
		args = append(args, arg(renewals[i].lockArg, renewals[i].lock))
	}
	if fttl != 0 {
		for _, i := range part {
			args = append(args, renewals[i].fence)
		}
	}
	args = append(args, ttl, fttl)
	for _, i := range part {
		args = append(args, arg(renewals[i].tokenArg, renewals[i].token))
	}
	return rexec.Raw{Args: args, Src: extendManyBody}
}

// bulkRenewReplies reads an extend_many reply for the renewals ids into
// out: every renewal extended but those the reply names.
func bulkRenewReplies(cmd *redis.Cmd, ids []int, out []reply) {
	res, err := cmd.Int64Slice()
	if err == nil && (len(res)%2 != 1 || res[0] != int64(len(ids))) {
		err = errBulkReply
	}
	for p := 1; err == nil && p < len(res); p += 2 {
		if i, code := res[p], res[p+1]; i < 1 || i > int64(len(ids)) || code == codeOK {
			err = errBulkReply
		}
	}
	if err != nil {
		for _, i := range ids {
			out[i] = reply{0, err}
		}
		return
	}
	for _, i := range ids {
		out[i] = reply{codeOK, nil}
	}
	for p := 1; p < len(res); p += 2 {
		out[ids[res[p]-1]] = reply{res[p+1], nil}
	}
}

// fenceMargin is how long a lock's fence counter must outlive the
// validity a renewal buys for the renewal to leave the counter's TTL
// alone: room for a renewal that runs late (queued, re-sent).
const fenceMargin = 5 * time.Second

// leanFence drops the fence counter's TTL push from the bulk renewal r,
// sent at sent for ttl, while the counter, as last pushed out, outlives
// what this renewal buys by fenceMargin: the renewal then runs two
// commands, not three, and carries no counter key. It reports whether r
// still pushes it. The counter only has to outlive the lock (`dlock list`
// finds locks by it); fencing stays monotonic even if it expires (see
// internal/lualib/fence.lua). Callers hold opMu.
func (l *Lease) leanFence(r *bulkRenewal, sent time.Time, ttl time.Duration) bool {
	if l.e.wd.at(sent.Add(ttl+fenceMargin)) < l.fenceUntil {
		r.fttl = 0
		return false
	}
	return true
}

// fencePushed records that a renewal sent at sent for ttl pushed the
// fence counter out. Callers hold opMu.
func (l *Lease) fencePushed(sent time.Time, ttl time.Duration) {
	l.fenceUntil = l.e.wd.at(sent.Add(FenceTTL(ttl)))
}
