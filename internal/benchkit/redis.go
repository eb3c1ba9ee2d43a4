package benchkit

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// CommandCalls returns the calls= counter of every cmdstat_* line of INFO
// commandstats, by lower-case command name ("evalsha", "get", "client|setinfo"),
// summed over every master of a Cluster or every shard of a Ring. Commands
// run inside scripts are counted by Redis under their own names.
func CommandCalls(ctx context.Context, rdb redis.UniversalClient) (map[string]int64, error) {
	stats, err := CommandStats(ctx, rdb)
	if err != nil {
		return nil, err
	}
	calls := make(map[string]int64, len(stats))
	for k, v := range stats {
		calls[k] = v.Calls
	}
	return calls, nil
}

// CommandStat is one command's counters in INFO commandstats.
type CommandStat struct {
	Calls int64 // calls=
	// Usec is the server's time inside the command (usec=). A script's
	// EVALSHA, EVAL or FCALL includes the time of the commands it calls,
	// which are counted under their own names too.
	Usec int64
}

// CommandStats returns the counters of every cmdstat_* line of INFO
// commandstats, by lower-case command name, summed over every master of a
// Cluster or every shard of a Ring.
func CommandStats(ctx context.Context, rdb redis.UniversalClient) (map[string]CommandStat, error) {
	total := map[string]CommandStat{}
	err := eachInfo(ctx, rdb, "commandstats", func(info string) {
		for k, v := range ParseCommandStatsUsec(info) {
			t := total[k]
			t.Calls += v.Calls
			t.Usec += v.Usec
			total[k] = t
		}
	})
	if err != nil {
		return nil, err
	}
	return total, nil
}

// ServerCPU returns used_cpu_sys + used_cpu_user of INFO cpu: the CPU time
// the Redis server process used since it started, summed over every master
// of a Cluster or every shard of a Ring.
func ServerCPU(ctx context.Context, rdb redis.UniversalClient) (time.Duration, error) {
	var total float64
	if err := eachInfo(ctx, rdb, "cpu", func(info string) { total += parseCPU(info) }); err != nil {
		return 0, err
	}
	return time.Duration(total * float64(time.Second)), nil
}

// eachInfo reads INFO section from every master of a Cluster, every shard
// of a Ring, or the one server of any other client, and hands each reply
// to add (one call at a time).
func eachInfo(ctx context.Context, rdb redis.UniversalClient, section string, add func(info string)) error {
	var mu sync.Mutex
	one := func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, section).Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		add(info)
		return nil
	}
	switch r := rdb.(type) {
	case *redis.ClusterClient:
		return r.ForEachMaster(ctx, one)
	case *redis.Ring:
		return r.ForEachShard(ctx, one)
	case *redis.Client:
		return one(ctx, r)
	default:
		info, err := rdb.Info(ctx, section).Result()
		if err == nil {
			add(info)
		}
		return err
	}
}

// parseCPU sums used_cpu_sys and used_cpu_user (seconds) of INFO cpu.
func parseCPU(info string) float64 {
	var sum float64
	for line := range strings.Lines(info) {
		name, val, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
			if f, err := strconv.ParseFloat(val, 64); err == nil {
				sum += f
			}
		}
	}
	return sum
}

// ParseCommandStats parses the text of INFO commandstats:
//
//	cmdstat_get:calls=21,usec=175,usec_per_call=8.33,rejected_calls=0,failed_calls=0
//
// and returns the calls of each command.
func ParseCommandStats(info string) map[string]int64 {
	m := map[string]int64{}
	for k, v := range ParseCommandStatsUsec(info) {
		m[k] = v.Calls
	}
	return m
}

// ParseCommandStatsUsec parses the text of INFO commandstats into the
// calls and usec of each command.
func ParseCommandStatsUsec(info string) map[string]CommandStat {
	m := map[string]CommandStat{}
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		var st CommandStat
		seen := false
		for field := range strings.SplitSeq(rest, ",") {
			k, v, _ := strings.Cut(field, "=")
			n, err := strconv.ParseInt(v, 10, 64)
			switch {
			case err != nil:
			case k == "calls":
				st.Calls, seen = n, true
			case k == "usec":
				st.Usec = n
			}
		}
		if seen {
			name = strings.ToLower(name)
			t := m[name]
			t.Calls += st.Calls
			t.Usec += st.Usec
			m[name] = t
		}
	}
	return m
}

// DeleteMatching deletes every key matching the glob pattern (SCAN, never
// KEYS; on a Cluster every master, on a Ring every shard) and returns how
// many it deleted.
func DeleteMatching(ctx context.Context, rdb redis.UniversalClient, pattern string) (int64, error) {
	var mu sync.Mutex
	var n int64
	one := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for {
			keys, next, err := c.Scan(ctx, cursor, pattern, 1000).Result()
			if err != nil {
				return err
			}
			for _, k := range keys {
				// One key per call: on a Cluster the keys of one SCAN page
				// may sit in different slots.
				d, err := c.Del(ctx, k).Result()
				if err != nil {
					return err
				}
				mu.Lock()
				n += d
				mu.Unlock()
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	var err error
	switch r := rdb.(type) {
	case *redis.ClusterClient:
		err = r.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return one(ctx, c) })
	case *redis.Ring:
		err = r.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return one(ctx, c) })
	default:
		err = one(ctx, rdb)
	}
	return n, err
}

// Percentiles summarises a set of latency samples.
type Percentiles struct {
	N                  int
	P50, P90, P99, Max time.Duration
}

// NewPercentiles computes the percentiles of samples (nearest rank). It
// sorts samples in place.
func NewPercentiles(samples []time.Duration) Percentiles {
	if len(samples) == 0 {
		return Percentiles{}
	}
	slices.Sort(samples)
	return Percentiles{
		N:   len(samples),
		P50: Quantile(samples, 0.50),
		P90: Quantile(samples, 0.90),
		P99: Quantile(samples, 0.99),
		Max: samples[len(samples)-1],
	}
}

// Quantile returns the q-quantile (0 < q <= 1) of sorted samples by the
// nearest-rank method, or 0 if there are none.
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(q*float64(len(sorted))+0.999999999) - 1
	return sorted[max(0, min(rank, len(sorted)-1))]
}

// ServerVersion names the server and its release from an INFO server
// reply: "Valkey 8.0.1" (Valkey also reports redis_version, the Redis
// release it is compatible with, 7.2.4 for Valkey 8) or "Redis 7.0.15";
// "" if the reply names neither.
func ServerVersion(info string) string {
	var name, redisV, valkeyV string
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "server_name":
			name = v
		case "redis_version":
			redisV = v
		case "valkey_version":
			valkeyV = v
		}
	}
	switch {
	case valkeyV != "" || name == "valkey":
		return "Valkey " + cmp.Or(valkeyV, redisV)
	case redisV != "":
		return "Redis " + redisV
	}
	return ""
}
