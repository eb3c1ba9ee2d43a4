package dlock

import (
	"context"
	"errors"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/keyspace"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/engine"
	"github.com/dlock-go/dlock/internal/oneline"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// nlReply is a Redis error reply whose text holds newlines.
type nlReply string

func (e nlReply) Error() string { return string(e) }
func (nlReply) RedisError()     {}

// TestWrappedErrorsOneLine: the errors dlock makes around what Redis, the
// driver or the context said print on one line, and still match what they
// wrap.
func TestWrappedErrorsOneLine(t *testing.T) {
	s := redistest.Start(t, redistest.Config{})
	rdb := s.Client(t)
	luaErr := rdb.Eval(context.Background(), "error('boom\\nsecond')", nil).Err()
	if luaErr == nil {
		t.Fatal("the script did not fail")
	}
	nl := nlReply("ERR Error running script\nstack traceback:\n\t[C]: in ?")
	multi := errors.Join(errors.New("first"), nl)
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	cases := map[string]error{
		"errs.Unavailable(redis error with newlines)": errs.Unavailable(nl),
		"errs.Unavailable(lua error)":                 errs.Unavailable(luaErr),
		"errs.Unavailable(joined)":                    errs.Unavailable(multi),
		"ctxDone":                                     errs.CtxDone(ctx),
		"ctxDoneAfter":                                errs.CtxDoneAfter(ctx, errs.Unavailable(nl)),
		"errs.CtxDoneAfter(no reply)":                 errs.CtxDoneAfter(ctx, errs.NoReply(time.Second, multi)),
		"withRedisCause":                              errs.WithRedisCause(errs.CtxDone(ctx), errs.Unavailable(multi)),
		"lostError(unreachable)":                      errs.Lost("k", oneline.Chain(ErrUnreachable, errs.Unavailable(nl))),
		"lostError(taken, wrong type)":                errs.Lost("k\nk", oneline.Chain(ErrTaken, ErrWrongType)),
		"lostError(joined)":                           errs.Lost("k", multi),
		"engine.KeptError":                            &engine.KeptError{Acquire: nl, Rollback: multi},
		"maybeAppliedError":                           &maybeAppliedError{op: "taking", key: "c\nc", n: 1, cause: multi},
		"closeError":                                  errs.Close(2, 3, []error{errs.Unavailable(nl), multi}),
		"not held, expired":                           oneline.Chain(ErrNotHeld, ErrExpired),
		"joined release errors":                       oneline.Join(multi, errs.Unavailable(nl)),
		"permission":                                  errs.Permission(nlReply("NOPERM this user has no permissions\nto access one of the keys")),
		"reservedKeyError":                            &reservedKeyError{key: "a\nb", lock: "c\nd", kind: string(keyspace.AuxFence)},
		"segmentMismatchError":                        &segmentMismatchError{name: "n\nn", given: 2, recorded: 3},
		"ttlError":                                    &errs.TTLError{TTL: time.Second, Min: 2 * time.Second, Max: time.Hour, Renew: true},
	}
	for name, err := range cases {
		if err == nil {
			t.Errorf("%s: nil", name)
			continue
		}
		if msg := err.Error(); strings.ContainsAny(msg, "\r\n") {
			t.Errorf("%s prints on more than one line: %q", name, msg)
		}
	}
	// Still matching what they wrap.
	var re redis.Error
	if e := errs.Unavailable(nl); !errors.Is(e, ErrUnavailable) || !errors.As(e, &re) {
		t.Errorf("errs.Unavailable(%q) lost what it wraps: %v", nl, e)
	}
	if e := errs.CtxDoneAfter(ctx, errs.Unavailable(nl)); !errors.Is(e, ErrContextDone) || !errors.Is(e, context.DeadlineExceeded) ||
		!errors.Is(e, ErrUnavailable) || !errors.As(e, &re) {
		t.Errorf("ctxDoneAfter lost what it wraps: %v", e)
	}
	if e := oneline.Chain(ErrNotHeld, ErrExpired); !errors.Is(e, ErrNotHeld) || !errors.Is(e, ErrExpired) {
		t.Errorf("chain lost what it wraps: %v", e)
	}
	if got, want := oneline.Chain(ErrNotHeld, ErrExpired).Error(), "dlock: lock not held: lock key deleted, or its TTL ran out"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
