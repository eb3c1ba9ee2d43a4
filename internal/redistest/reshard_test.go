package redistest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

// TestMoveSlot moves a slot of 95 keys to another master at a pace (10
// keys per MIGRATE, 20ms apart) while a cluster client reads them: every
// read finds its value (followed through ASK while the slot migrates), and
// a multi-key command on the slot is refused with TRYAGAIN while its keys
// are split between the two masters. Afterwards every node says the target
// serves the slot, which holds every key there and none on the source.
// Then MoveSlotsOf moves the slots of keys in two slots, each to another
// master.
func TestMoveSlot(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 60*time.Second)
	cl := redistest.StartCluster(t, redistest.ClusterConfig{})
	cc := cl.Client(t)
	const n = 95
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("{mv}:%d", i)
		if err := cc.Set(ctx, keys[i], i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	slot, err := cl.Slot(ctx, keys[0])
	if err != nil {
		t.Fatal(err)
	}
	from, err := cl.MasterOf(ctx, keys[0])
	if err != nil {
		t.Fatal(err)
	}
	var to *redistest.Server
	for _, m := range cl.Masters(ctx) {
		if m != from {
			to = m
			break
		}
	}

	var stop atomic.Bool
	var reads, tryagain atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			k := keys[i%n]
			v, err := cc.Get(ctx, k).Int()
			if err != nil || v != i%n {
				t.Errorf("GET %s during the move = %d, %v", k, v, err)
				return
			}
			reads.Add(1)
			if err := cc.MGet(ctx, keys[0], keys[n-1]).Err(); err != nil && strings.HasPrefix(err.Error(), "TRYAGAIN") {
				tryagain.Add(1)
			}
		}
	})
	m, err := cl.MoveSlot(ctx, slot, to, redistest.MoveOptions{Pace: 20 * time.Millisecond})
	stop.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v; %d reads meanwhile, %d MGET refused with TRYAGAIN", m, reads.Load(), tryagain.Load())
	if m.From != from || m.To != to || m.Keys != n || m.Batches != (n+9)/10 {
		t.Errorf("account %v; want %s -> %s, %d keys in %d MIGRATE", m, from.Addr(), to.Addr(), n, (n+9)/10)
	}
	if d := m.Migrated.Sub(m.Start); d < time.Duration(n/10)*20*time.Millisecond {
		t.Errorf("migrated in %v: the pace was not kept", d)
	}
	if reads.Load() == 0 {
		t.Error("no read during the move")
	}
	for _, node := range cl.Nodes {
		if got, err := node.Client(t).ClusterCountKeysInSlot(ctx, slot).Result(); err != nil || (node == to) != (got == n) || (node != to && got != 0) {
			t.Errorf("%s holds %d keys of slot %d (%v)", node.Addr(), got, slot, err)
		}
	}
	if got, err := cl.MasterOf(ctx, keys[0]); err != nil || got != to {
		t.Fatalf("slot %d served by %v (%v), want %s", slot, got, err, to.Addr())
	}
	for i, k := range keys {
		if v, err := cc.Get(ctx, k).Int(); err != nil || v != i {
			t.Fatalf("GET %s after the move = %d, %v", k, v, err)
		}
	}
	if _, err := cl.MoveSlot(ctx, slot, to, redistest.MoveOptions{}); err == nil {
		t.Error("a move to the master that serves the slot was accepted")
	}
	if _, err := cl.MoveSlot(ctx, 16384, to, redistest.MoveOptions{}); err == nil {
		t.Error("slot 16384 accepted")
	}

	two := []string{"{mv}:0", "{mv2}:0", "{mv}:1"}
	if err := cc.Set(ctx, two[1], "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var before []*redistest.Server
	for _, k := range two {
		m, err := cl.MasterOf(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, m)
	}
	moves, err := cl.MoveSlotsOf(ctx, two, redistest.MoveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(moves) != 2 || moves[0].Keys != n || moves[1].Keys != 1 {
		t.Fatalf("MoveSlotsOf: %v; want 2 moves, of %d keys and 1", moves, n)
	}
	for i, k := range two {
		m, err := cl.MasterOf(ctx, k)
		if err != nil || m == before[i] || !slices.Contains(cl.Masters(ctx), m) {
			t.Errorf("%s served by %v after MoveSlotsOf (%v), before by %s", k, m, err, before[i].Addr())
		}
	}

	// Migrating runs while the slot is migrating, before any key moves;
	// its error ends the move there.
	from, err = cl.MasterOf(ctx, keys[0])
	if err != nil {
		t.Fatal(err)
	}
	to = cl.Masters(ctx)[0]
	if to == from {
		to = cl.Masters(ctx)[1]
	}
	stopped := errors.New("stop here")
	m, err = cl.MoveSlot(ctx, slot, to, redistest.MoveOptions{Migrating: func(ctx context.Context) error {
		info, err := from.Client(t).ClusterNodes(ctx).Result()
		if err != nil || !strings.Contains(info, fmt.Sprintf("[%d->-", slot)) {
			t.Errorf("the source's CLUSTER NODES does not show slot %d migrating (%v):\n%s", slot, err, info)
		}
		return stopped
	}})
	if !errors.Is(err, stopped) || m.Keys != 0 {
		t.Errorf("MoveSlot with Migrating failing = %v, %v; want its error, no key moved", m, err)
	}
	if got, err := from.Client(t).ClusterCountKeysInSlot(ctx, slot).Result(); err != nil || got != n {
		t.Errorf("the source holds %d keys of slot %d (%v), want %d", got, slot, err, n)
	}
}
