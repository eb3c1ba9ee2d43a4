package benchkit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/benchkit"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_get:calls=21,usec=175,usec_per_call=8.33,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_client|setinfo:calls=4,usec=3,usec_per_call=0.75,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_EVALSHA:calls=7,usec=70,usec_per_call=10.00,rejected_calls=0,failed_calls=1\r\n" +
		"garbage line\r\n"
	got := benchkit.ParseCommandStats(info)
	want := map[string]int64{"get": 21, "client|setinfo": 4, "evalsha": 7}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %d, want %d", k, got[k], v)
		}
	}
}

func TestPercentiles(t *testing.T) {
	var s []time.Duration
	for i := 100; i >= 1; i-- {
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	p := benchkit.NewPercentiles(s)
	if p.N != 100 || p.P50 != 50*time.Millisecond || p.P99 != 99*time.Millisecond || p.Max != 100*time.Millisecond {
		t.Errorf("got %+v", p)
	}
	if (benchkit.NewPercentiles(nil) != benchkit.Percentiles{}) {
		t.Error("empty samples")
	}
	if q := benchkit.Quantile([]time.Duration{7}, 0.99); q != 7 {
		t.Errorf("one sample: %v", q)
	}
}

func server(t *testing.T) (*redistest.Server, *redis.Client) {
	s := redistest.Start(t, redistest.Config{})
	return s, s.Client(t)
}

// dlockClients builds benchmark clients over dlock, each with its own
// connections.
func dlockClients(s *redistest.Server, prefix string) func(int) (benchkit.Client, error) {
	return func(int) (benchkit.Client, error) {
		rdb := s.NewClient()
		c, err := dlock.New(rdb, dlock.Options{Prefix: prefix})
		if err != nil {
			return benchkit.Client{}, err
		}
		return benchkit.Client{
			Acquire: func(ctx context.Context, key string) (func(context.Context) error, error) {
				lk, err := c.Lock(ctx, key)
				if err != nil {
					return nil, err
				}
				return lk.Unlock, nil
			},
			Close: func() error { _ = c.Close(); return rdb.Close() },
		}, nil
	}
}

func TestRunDlock(t *testing.T) {
	s, rdb := server(t)
	res, err := benchkit.Run(context.Background(), benchkit.Config{
		Clients:   4,
		NewClient: dlockClients(s, "bk"),
		Keys:      []string{"bk:a", "bk:b"},
		Hold:      200 * time.Microsecond,
		Duration:  500 * time.Millisecond,
		Redis:     rdb,
	})
	if err != nil {
		t.Fatal(err)
	}
	lo, _ := res.Fairness()
	switch {
	case res.Sections == 0, res.Overlaps != 0, res.AcquireErrors != 0, res.ReleaseErrors != 0:
		t.Fatalf("%+v", res)
	case res.Commands <= 0 || res.CommandsPerSection() < 2:
		t.Errorf("commands: %d (%v per section)", res.Commands, res.CommandsPerSection())
	case res.ByCommand["info"] != 0 || res.ByCommand["ping"] != 0:
		t.Errorf("INFO and PING counted: %v", res.ByCommand)
	case res.Handoff.N == 0 || res.Acquire.N != int(res.Sections):
		t.Errorf("samples: hand-off %d, acquire %d, sections %d", res.Handoff.N, res.Acquire.N, res.Sections)
	case res.Ping.N == 0 || res.PingIdle.N != 50:
		t.Errorf("pings: %+v / %+v", res.Ping, res.PingIdle)
	case lo == 0:
		t.Errorf("a client never got the lock: %v", res.PerClient)
	}
	rep := res.Report()
	if rep.Sections != res.Sections || rep.Overlaps != 0 || rep.SectionsPerS <= 0 {
		t.Errorf("report: %+v", rep)
	}
}

// TestRunDetectsOverlap checks the checker: a "lock" that excludes nothing
// must show overlaps.
func TestRunDetectsOverlap(t *testing.T) {
	noLock := func(int) (benchkit.Client, error) {
		return benchkit.Client{Acquire: func(ctx context.Context, key string) (func(context.Context) error, error) {
			return func(context.Context) error { return nil }, nil
		}}, nil
	}
	res, err := benchkit.Run(context.Background(), benchkit.Config{
		Clients: 4, NewClient: noLock, Keys: []string{"k"}, Hold: time.Millisecond, Duration: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Overlaps == 0 {
		t.Fatalf("no overlaps detected without a lock: %+v", res)
	}
	if res.Commands != -1 || res.CommandsPerSection() != -1 {
		t.Errorf("commands without Redis: %d", res.Commands)
	}
}

func TestRunConfigErrors(t *testing.T) {
	ctx := context.Background()
	nc := func(int) (benchkit.Client, error) { return benchkit.Client{}, fmt.Errorf("boom") }
	for _, cfg := range []benchkit.Config{
		{Keys: []string{"k"}},
		{NewClient: nc},
		{NewClient: nc, Keys: []string{"k"}, Clients: -1},
		{NewClient: nc, Keys: []string{"k"}}, // NewClient fails
	} {
		if _, err := benchkit.Run(ctx, cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}

func TestDeleteMatching(t *testing.T) {
	_, rdb := server(t)
	ctx := context.Background()
	for i := range 2500 {
		rdb.Set(ctx, fmt.Sprintf("ns1:%d", i), 1, 0)
	}
	rdb.Set(ctx, "ns2:keep", 1, 0)
	n, err := benchkit.DeleteMatching(ctx, rdb, "ns1:*")
	if err != nil || n != 2500 {
		t.Fatalf("deleted %d, %v", n, err)
	}
	if rdb.DBSize(ctx).Val() != 1 {
		t.Errorf("left %d keys", rdb.DBSize(ctx).Val())
	}
}
