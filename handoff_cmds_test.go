package dlock_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// stepCommands runs step and returns the commands Redis ran for it, by
// name, from INFO commandstats (which counts the commands a script calls
// too), CONFIG RESETSTAT and INFO excluded.
func stepCommands(t *testing.T, ctx context.Context, rdb *redis.Client, step func()) (total int64, by map[string]int64) {
	t.Helper()
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	step()
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	by = map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(rest, "calls=") || name == "config|resetstat" || name == "info" {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			t.Fatalf("commandstats line %q: %v", line, err)
		}
		by[name] += n
		total += n
	}
	return total, by
}

func fmtCommands(by map[string]int64) string {
	var names []string
	for n := range by {
		names = append(names, n)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, " %s=%d", n, by[n])
	}
	return b.String()
}
