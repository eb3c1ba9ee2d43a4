package redistest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Resharding: moving a slot from one master to another while clients use
// it, the way `redis-cli --cluster reshard` moves each slot
// (clusterManagerMoveSlot): CLUSTER SETSLOT IMPORTING on the target and
// MIGRATING on the source; then, until the source has none left, CLUSTER
// GETKEYSINSLOT and one MIGRATE of that many keys; then CLUSTER SETSLOT
// NODE on the target first, the source next, and every other master.

// MoveOptions paces a slot's move. The zero value moves as `redis-cli
// --cluster reshard` does with its defaults.
type MoveOptions struct {
	// Pipeline is how many keys each MIGRATE moves (redis-cli's
	// --cluster-pipeline); default 10.
	Pipeline int
	// Timeout is MIGRATE's timeout (redis-cli's --cluster-timeout);
	// default 60s.
	Timeout time.Duration
	// Pace is a pause after each MIGRATE. Default 0: back to back, as
	// redis-cli sends them.
	Pace time.Duration
	// Migrating, if set, is called once the slot is IMPORTING on the
	// target and MIGRATING on the source, before any key moves: the slot
	// stays so while it runs. An error it returns ends the move there,
	// with the slot left migrating.
	Migrating func(ctx context.Context) error
}

func (o MoveOptions) withDefaults() (MoveOptions, error) {
	if o.Pipeline < 0 || o.Timeout < 0 || o.Pace < 0 {
		return o, errors.New("redistest: negative MoveOptions field")
	}
	if o.Pipeline == 0 {
		o.Pipeline = 10
	}
	if o.Timeout == 0 {
		o.Timeout = 60 * time.Second
	}
	return o, nil
}

// SlotMove is the account of one slot's move.
type SlotMove struct {
	Slot     int
	From, To *Server
	Keys     int // keys migrated
	Batches  int // MIGRATE calls
	// Start: before SETSLOT IMPORTING; Migrated: after the last MIGRATE;
	// End: after the last SETSLOT NODE.
	Start, Migrated, End time.Time
}

// Duration is how long the slot was in migration (IMPORTING to the last
// SETSLOT NODE).
func (m SlotMove) Duration() time.Duration { return m.End.Sub(m.Start) }

func (m SlotMove) String() string {
	return fmt.Sprintf("slot %d %s -> %s: %d keys in %d MIGRATE, %v", m.Slot, m.From.Addr(), m.To.Addr(),
		m.Keys, m.Batches, m.Duration().Round(time.Millisecond))
}

// MoveSlot moves slot, and every key in it, from the master serving it to
// the master to, while the cluster stays in use (see the comment above).
// It fails if to is not a running master or already serves the slot. The
// account it returns is filled as far as the move went.
func (c *Cluster) MoveSlot(ctx context.Context, slot int, to *Server, o MoveOptions) (SlotMove, error) {
	m := SlotMove{Slot: slot, To: to}
	o, err := o.withDefaults()
	if err != nil {
		return m, err
	}
	if slot < 0 || slot > 16383 {
		return m, fmt.Errorf("redistest: slot %d out of range", slot)
	}
	masters := c.Masters(ctx)
	if !slices.Contains(masters, to) {
		return m, fmt.Errorf("redistest: %s is not a running master", to.Addr())
	}
	from, err := c.masterOfSlot(ctx, slot)
	if err != nil {
		return m, err
	}
	m.From = from
	if from == to {
		return m, fmt.Errorf("redistest: slot %d is already served by %s", slot, to.Addr())
	}
	src, dst := adminClient(from, o.Timeout), adminClient(to, o.Timeout)
	defer src.Close()
	defer dst.Close()
	srcID, err := src.ClusterMyID(ctx).Result()
	if err != nil {
		return m, fmt.Errorf("redistest: CLUSTER MYID on %s: %w", from.Addr(), err)
	}
	dstID, err := dst.ClusterMyID(ctx).Result()
	if err != nil {
		return m, fmt.Errorf("redistest: CLUSTER MYID on %s: %w", to.Addr(), err)
	}
	// The target's SETSLOT NODE bumps its config epoch past the greatest
	// it knows of. If it has not yet heard of a bump another node made in
	// an earlier move, the source's claim, gossiped before its own SETSLOT
	// NODE, can carry the greater epoch and take the slot back from the
	// target: then no node serves it. redis-cli checks the cluster before
	// each reshard; here: let the epochs agree before each move.
	if err := c.waitEpochsAgree(ctx, masters); err != nil {
		return m, err
	}
	m.Start = time.Now()
	if err := setSlot(ctx, dst, slot, "importing", srcID); err != nil {
		return m, err
	}
	if err := setSlot(ctx, src, slot, "migrating", dstID); err != nil {
		return m, err
	}
	if o.Migrating != nil {
		if err := o.Migrating(ctx); err != nil {
			return m, err
		}
	}
	if err := migrateKeys(ctx, src, to, slot, o, &m); err != nil {
		return m, err
	}
	m.Migrated = time.Now()
	if err := setSlot(ctx, dst, slot, "node", dstID); err != nil {
		return m, err
	}
	// A source that had no other slot has made itself a replica of the
	// target by now: redis-cli ignores the refusal that brings.
	if err := setSlot(ctx, src, slot, "node", dstID); err != nil && !strings.Contains(err.Error(), "only with masters") {
		return m, err
	}
	for _, n := range masters {
		if n == from || n == to {
			continue
		}
		rc := adminClient(n, o.Timeout)
		err := setSlot(ctx, rc, slot, "node", dstID)
		_ = rc.Close()
		if err != nil {
			return m, err
		}
	}
	m.End = time.Now()
	return m, c.confirmOwner(ctx, slot, to, dst, dstID)
}

// waitEpochsAgree waits until every node in nodes reports the same
// cluster_current_epoch.
func (c *Cluster) waitEpochsAgree(ctx context.Context, nodes []*Server) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := poll(ctx, func() error {
		epochs := map[int]bool{}
		for _, n := range nodes {
			rc := adminClient(n, time.Second)
			info, err := rc.ClusterInfo(ctx).Result()
			_ = rc.Close()
			if err != nil {
				return err
			}
			epochs[infoField(info, "cluster_current_epoch")] = true
		}
		if len(epochs) != 1 {
			return fmt.Errorf("current epochs differ: %v", epochs)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redistest: cluster epochs did not agree: %w", err)
	}
	return nil
}

// confirmOwner waits until to serves slot by its own view. Should a stale
// claim have taken it back, to bumps its epoch and claims it again, as
// `redis-cli --cluster fix` would.
func (c *Cluster) confirmOwner(ctx context.Context, slot int, to *Server, dst *redis.Client, dstID string) error {
	for try := 0; ; try++ {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		owner, err := c.masterOfSlot(wctx, slot)
		cancel()
		if err == nil && owner == to {
			return nil
		}
		if try == 3 {
			if err == nil {
				err = fmt.Errorf("%s serves it", owner.Addr())
			}
			return fmt.Errorf("redistest: slot %d: %s does not serve it after the move: %w", slot, to.Addr(), err)
		}
		if err := dst.Do(ctx, "cluster", "bumpepoch").Err(); err != nil {
			return fmt.Errorf("redistest: CLUSTER BUMPEPOCH on %s: %w", to.Addr(), err)
		}
		if err := setSlot(ctx, dst, slot, "node", dstID); err != nil {
			return err
		}
	}
}

// migrateKeys moves the keys of slot from src to the master to, o.Pipeline
// at a time, until src has none left.
func migrateKeys(ctx context.Context, src *redis.Client, to *Server, slot int, o MoveOptions, m *SlotMove) error {
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, o.Pipeline).Result()
		if err != nil {
			return fmt.Errorf("redistest: CLUSTER GETKEYSINSLOT %d: %w", slot, err)
		}
		if len(keys) == 0 {
			return nil
		}
		args := []any{"migrate", "127.0.0.1", to.Port, "", 0, o.Timeout.Milliseconds(), "keys"}
		for _, k := range keys {
			args = append(args, k)
		}
		// NOKEY: the keys expired meanwhile; nothing was left to move.
		if err := src.Do(ctx, args...).Err(); err != nil && err.Error() != "NOKEY" {
			return fmt.Errorf("redistest: MIGRATE of %d keys of slot %d: %w", len(keys), slot, err)
		}
		m.Keys += len(keys)
		m.Batches++
		if o.Pace > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(o.Pace):
			}
		}
	}
}

// MoveSlotsOf moves every slot holding one of keys, one slot after the
// other (in the order of keys), each to the next running master after the
// one serving it, and returns the account of each move.
func (c *Cluster) MoveSlotsOf(ctx context.Context, keys []string, o MoveOptions) ([]SlotMove, error) {
	var slots []int
	for _, k := range keys {
		s, err := c.Slot(ctx, k)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(slots, s) {
			slots = append(slots, s)
		}
	}
	var moves []SlotMove
	for _, s := range slots {
		from, err := c.masterOfSlot(ctx, s)
		if err != nil {
			return moves, err
		}
		masters := c.Masters(ctx)
		i := slices.Index(masters, from)
		if i < 0 || len(masters) < 2 {
			return moves, fmt.Errorf("redistest: slot %d: no other master to move it to", s)
		}
		m, err := c.MoveSlot(ctx, s, masters[(i+1)%len(masters)], o)
		if err != nil {
			return moves, err
		}
		moves = append(moves, m)
	}
	return moves, nil
}

// masterOfSlot returns the master serving slot, as CLUSTER SLOTS on the
// first running node that answers reports it.
func (c *Cluster) masterOfSlot(ctx context.Context, slot int) (*Server, error) {
	// The node that serves slot by its own view: another node's view can
	// lag a move just made (gossip), and a MIGRATING set on a node that
	// no longer owns the slot is refused. Views converge within moments.
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var last error
	for {
		m, err := c.selfOwnerOfSlot(ctx, slot)
		if err == nil {
			return m, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, last
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// selfOwnerOfSlot returns the running node whose CLUSTER SLOTS names
// itself as slot's master.
func (c *Cluster) selfOwnerOfSlot(ctx context.Context, slot int) (*Server, error) {
	var errs []error
	for _, n := range c.Nodes {
		if n.PID() == 0 {
			continue
		}
		rc := adminClient(n, time.Second)
		//lint:ignore SA1019 CLUSTER SLOTS answers on every Redis version the tests run on; CLUSTER SHARDS needs 7.0
		slots, err := rc.ClusterSlots(ctx).Result()
		_ = rc.Close()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, s := range slots {
			if s.Start <= slot && slot <= s.End && len(s.Nodes) > 0 && c.node(s.Nodes[0].Addr) == n {
				return n, nil
			}
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("redistest: no node serves slot %d by its own view: %w", slot, errors.Join(errs...))
	}
	return nil, fmt.Errorf("redistest: no node serves slot %d by its own view", slot)
}

// adminClient is a client of one node for the harness's own commands: no
// retries, and a read timeout past a MIGRATE's timeout.
func adminClient(n *Server, timeout time.Duration) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: n.Addr(), DialTimeout: time.Second,
		ReadTimeout: timeout + time.Second, MaxRetries: -1, PoolSize: 1})
}

func setSlot(ctx context.Context, rc *redis.Client, slot int, state, id string) error {
	if err := rc.Do(ctx, "cluster", "setslot", slot, state, id).Err(); err != nil {
		return fmt.Errorf("redistest: CLUSTER SETSLOT %d %s %s on %s: %w", slot, state, id, rc.Options().Addr, err)
	}
	return nil
}
