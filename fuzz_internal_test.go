package dlock

import (
	"context"
	"errors"
	"github.com/dlock-go/dlock/internal/engine"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Fuzz targets. `go test` runs their seed corpora (f.Add) as ordinary
// tests, under -race in CI; `go test -run '^$' -fuzz FuzzX -fuzztime 30s`
// explores further, one target per invocation.

// FuzzOptions: New and the per-call TTL either reject an input (with an
// ErrInvalidArgument, never a panic) or accept one a lock can live with:
// the validity (TTL minus the drift) is positive and no longer than the
// TTL, renewals come before the deadline, every duration sent to Redis is
// at least 1ms and does not overflow.
func FuzzOptions(f *testing.F) {
	f.Add("", int64(0), int64(0), int64(0), int64(0), int64(0), int64(0), 0, int64(0), 0.0, int64(0), int64(0))
	f.Add("app", int64(time.Second), int64(300*time.Millisecond), int64(time.Second), int64(time.Second),
		int64(time.Second), int64(3*time.Second), 1, int64(100*time.Millisecond), 0.01, int64(2*time.Millisecond), int64(5*time.Second))
	f.Add("x", int64(time.Millisecond), int64(0), int64(0), int64(0), int64(time.Millisecond), int64(3*time.Millisecond), 0, int64(0), -1.0, int64(-1), int64(3*time.Millisecond))
	f.Add("{", int64(-1), int64(-1), int64(-1), int64(-1), int64(-1), int64(-1), -1, int64(-1), 0.5, int64(time.Hour), int64(time.Hour))
	// Found by the fuzzer or next to what it found (now rejected):
	// a drift that leaves less validity than the renewal interval, drift
	// factors that are not numbers or overflow, a TTL whose fence-counter
	// TTL overflows.
	f.Add("p", int64(10*time.Second), int64(20*time.Second), int64(0), int64(0), int64(0), int64(0), 0, int64(0), 0.99, int64(0), int64(0))
	f.Add("p", int64(3*time.Second), int64(0), int64(0), int64(0), int64(0), int64(0), 0, int64(0), 0.7, int64(0), int64(0))
	f.Add("p", int64(0), int64(0), int64(0), int64(0), int64(0), int64(0), 0, int64(0), math.NaN(), int64(0), int64(0))
	f.Add("p", int64(0), int64(0), int64(0), int64(0), int64(0), int64(0), 0, int64(0), math.Inf(1), int64(0), int64(0))
	f.Add("p", int64(0), int64(0), int64(0), int64(0), int64(0), int64(0), 0, int64(0), 1e300, int64(0), int64(0))
	f.Add("p", int64(0), int64(0), int64(0), int64(0), int64(0), int64(0), 0, int64(0), 0.0, int64(0), int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, prefix string, ttl, renew, retry, release, pickup, lease int64, replicas int,
		replTimeout int64, driftFactor float64, minDrift, callTTL int64) {
		o := Options{Prefix: prefix, TTL: time.Duration(ttl), RenewInterval: time.Duration(renew),
			RetryInterval: time.Duration(retry), ReleaseTimeout: time.Duration(release),
			PickupTimeout: time.Duration(pickup), WaiterLease: time.Duration(lease), MinReplicas: replicas,
			ReplicaTimeout: time.Duration(replTimeout), DriftFactor: driftFactor, MinDrift: time.Duration(minDrift)}
		rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: New makes no Redis call
		defer rdb.Close()
		c, err := New(rdb, o)
		if err != nil {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("New rejected %+v with %v, which is not an ErrInvalidArgument", o, err)
			}
			return
		}
		defer c.Close()
		got := c.Options()
		if strings.ContainsAny(got.Prefix, "{}") || got.Prefix == "" {
			t.Fatalf("prefix %q accepted", got.Prefix)
		}
		if got.PickupTimeout < time.Millisecond || got.WaiterLease < 3*time.Millisecond || got.WaiterLease/3 < time.Millisecond {
			t.Fatalf("pickup %v, lease %v accepted", got.PickupTimeout, got.WaiterLease)
		}
		if got.RetryInterval <= 0 || got.ReleaseTimeout <= 0 || got.ReplicaTimeout <= 0 || got.MinReplicas < 0 {
			t.Fatalf("a non-positive duration accepted: %+v", got)
		}
		for _, lt := range []time.Duration{0, time.Duration(callTTL)} {
			effective := got.TTL
			var opts []LockOption
			if lt != 0 {
				opts, effective = []LockOption{WithTTL(lt)}, lt
			}
			// A closed Client checks the arguments, then says ErrClosed.
			closed, _ := New(rdb, o)
			closed.Close()
			_, err := closed.TryLock(context.Background(), "k", opts...)
			if errors.Is(err, ErrInvalidArgument) {
				continue
			}
			if !errors.Is(err, ErrClosed) {
				t.Fatalf("TryLock on a closed Client: %v", err)
			}
			drift := got.drift(effective)
			validity := effective - drift
			if drift < 0 || validity <= 0 || validity > effective {
				t.Fatalf("TTL %v accepted with drift %v: validity %v", effective, drift, validity)
			}
			if r := got.renewEvery(effective); r <= 0 || r >= validity {
				t.Fatalf("TTL %v accepted: renewal every %v, validity %v", effective, r, validity)
			}
			if effective.Milliseconds() < 1 || engine.FenceTTL(effective) <= effective {
				t.Fatalf("TTL %v accepted: %dms on the wire, fence counter TTL %v", effective, effective.Milliseconds(), engine.FenceTTL(effective))
			}
		}
	})
}

// FuzzGrant: the acquire script's reply decoder turns exactly {1, f} with
// f >= 1 into a grant of fence f, {0, pttl} (pttl >= -2) into "not
// acquired", {-2, _} into ErrWrongType, and anything else into an error:
// never a grant, never a silent "not acquired". No reply panics it.
func FuzzGrant(f *testing.F) {
	for _, seed := range [][]byte{
		{tagArr, 2, tagInt, 1, tagInt, 200}, // {1, fence}
		{tagArr, 2, tagInt, 0, tagInt, 100}, // {0, pttl}
		{tagArr, 2, tagInt, 0, tagNeg, 2},   // {0, -2}: free, waiters ahead
		{tagArr, 2, tagInt, 0, tagNeg, 1},   // {0, -1}: no TTL
		{tagArr, 2, tagNeg, 2, tagInt, 0},   // {-2, 0}: wrong type
		{tagArr, 3, tagInt, 1, tagInt, 5, tagInt, 5},
		{tagArr, 1, tagInt, 1},
		{tagArr, 2, tagStr, '1', tagStr, '5'},
		{tagArr, 2, tagNil, tagInt, 1},
		{tagErr, 'N', 'O', 'S', 'C', 'R', 'I', 'P', 'T'},
		{tagStr, 'O', 'K'},
		{tagInt, 1},
		{tagNil},
		{tagArr, 2, tagArr, 0, tagInt, 1},
		// Found by the fuzzer (now errors): {1, 0}, {1, -1}, an unknown
		// status code, {0, -48}.
		{tagArr, 2, tagInt, 1, tagInt, 0},
		{tagArr, 2, tagInt, 1, tagNeg, 1},
		{tagArr, 2, tagInt, 3, tagInt, 0},
		{tagArr, 2, tagInt, 0, tagNeg, 48},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		val, _, err := buildReply(data, 0)
		cmd := redis.NewCmd(context.Background())
		if err != nil {
			cmd.SetErr(err)
		} else {
			cmd.SetVal(val)
		}
		g, gerr := tokenLock{}.grant("tok", cmd)
		if g.Value != "tok" {
			t.Fatalf("grant value %q", g.Value)
		}
		res, shapeErr := int64Pair(val, err)
		switch {
		case g.Acquired:
			if gerr != nil || shapeErr != nil || res[0] != codeOK || res[1] < 1 || g.Fence != uint64(res[1]) {
				t.Fatalf("reply %#v (err %v) decoded as a grant of fence %d (err %v)", val, err, g.Fence, gerr)
			}
		case gerr == nil:
			if shapeErr != nil || res[0] != 0 || res[1] < -2 {
				t.Fatalf("reply %#v (err %v) decoded as \"not acquired\" (holder TTL %v)", val, err, g.HolderTTL)
			}
			if want := time.Duration(max(res[1], 0)) * time.Millisecond; res[1] != -1 && g.HolderTTL != want {
				t.Fatalf("reply %#v: holder TTL %v, want %v", val, g.HolderTTL, want)
			}
		case shapeErr == nil && res[0] == codeWrongType && !errors.Is(gerr, ErrWrongType):
			t.Fatalf("reply %#v: %v, want ErrWrongType", val, gerr)
		}
	})
}

// Tags of the reply trees FuzzGrant builds from bytes.
const (
	tagInt = iota // next byte: a non-negative int64
	tagNeg        // next byte: a negative int64
	tagStr        // rest of the bytes up to the next tag byte < 8: a string
	tagNil        // redis.Nil
	tagArr        // next byte: n; then n elements
	tagErr        // rest: an error reply (redis.Error)
	tagBig        // next 8 bytes: an int64
)

type replyErr string

func (e replyErr) Error() string { return string(e) }
func (e replyErr) RedisError()   {}

// buildReply decodes a reply tree from data at i, as go-redis would hand
// it over: int64, string, nil, []any, or an error.
func buildReply(data []byte, depth int) (any, int, error) {
	if len(data) == 0 {
		return nil, 0, redis.Nil
	}
	i := 1
	switch data[0] % 7 {
	case tagInt, tagNeg:
		var n int64
		if len(data) > 1 {
			n, i = int64(data[1]), 2
		}
		if data[0]%7 == tagNeg {
			n = -n
		}
		return n, i, nil
	case tagBig:
		var n uint64
		for ; i < len(data) && i < 9; i++ {
			n = n<<8 | uint64(data[i])
		}
		return int64(n), i, nil
	case tagStr:
		for i < len(data) && data[i] >= 8 {
			i++
		}
		return string(data[1:i]), i, nil
	case tagNil:
		return nil, 1, redis.Nil
	case tagErr:
		return nil, len(data), replyErr(string(data[1:]))
	default: // tagArr
		if len(data) < 2 || depth > 3 {
			return []any{}, len(data), nil
		}
		n, i := int(data[1]%6), 2
		out := make([]any, 0, n)
		for range n {
			if i >= len(data) {
				break
			}
			v, used, err := buildReply(data[i:], depth+1)
			if err != nil && !errors.Is(err, redis.Nil) {
				v = err // an error inside an array arrives as the element
			}
			out = append(out, v)
			i += used
		}
		return out, i, nil
	}
}

// int64Pair reports whether a reply is a pair of integers, and which.
func int64Pair(val any, err error) ([]int64, error) {
	if err != nil {
		return nil, err
	}
	arr, ok := val.([]any)
	if !ok || len(arr) != 2 {
		return nil, errors.New("not a pair")
	}
	out := make([]int64, 2)
	for i, v := range arr {
		switch v := v.(type) {
		case int64:
			out[i] = v
		case string: // go-redis reads a numeric string as an integer too
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, err
			}
			out[i] = n
		default:
			return nil, errors.New("not an integer")
		}
	}
	return out, nil
}
