package fenced_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fenced"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestCheckServerEviction: CheckServer refuses a Redis that may evict the
// guard records (an evicted one accepts any fence), on one line naming the
// policy, and passes noeviction.
func TestCheckServerEviction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := redistest.Start(t, redistest.Config{ExtraArgs: []string{"--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"}})
	err := fenced.CheckServer(ctx, s.Client(t))
	if !errors.Is(err, dlock.ErrEvictionPolicy) || !strings.Contains(err.Error(), "allkeys-lru") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("CheckServer on allkeys-lru: %v, want a one-line ErrEvictionPolicy naming it", err)
	}
	if err := fenced.CheckServer(ctx, srv.Client(t)); err != nil {
		t.Fatalf("CheckServer on noeviction: %v", err)
	}
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer down.Close()
	if err := fenced.CheckServer(ctx, down); !errors.Is(err, dlock.ErrUnavailable) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("CheckServer on a closed port: %v, want a one-line ErrUnavailable", err)
	}
	if err := fenced.CheckServer(ctx, nil); !errors.Is(err, dlock.ErrNilClient) {
		t.Fatalf("CheckServer(nil): %v", err)
	}
}
