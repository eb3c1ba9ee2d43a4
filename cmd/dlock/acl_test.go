package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// aclURL makes a Redis user on srv with rules and returns a URL that logs
// in as it; the user goes at the end of the test.
func aclURL(t *testing.T, rules string) string {
	t.Helper()
	ctx := context.Background()
	_, rdb := lib(t)
	user := fmt.Sprintf("cli-acl-%d", keySeq.Add(1))
	args := []any{"ACL", "SETUSER", user, "reset", "on", ">pw"}
	for _, r := range strings.Fields(rules) {
		args = append(args, r)
	}
	if err := rdb.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	t.Cleanup(func() { _ = rdb.Do(context.Background(), "ACL", "DELUSER", user).Err() })
	return "redis://" + user + ":pw@" + srv.Addr() + "/0"
}

// A Redis user whose ACL refuses dlock a key or its channels: dlock run
// says so in one line and exits 125 without running the command.
func TestRunACLRefused(t *testing.T) {
	for _, tc := range []struct{ name, rules, what string }{
		{"key pattern", "~app:* &* +@all", "key"},
		{"no channels", "~* resetchannels +@all", "channel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := lib(t)
			k := testKey(t)
			held, err := c.Lock(context.Background(), k)
			if err != nil {
				t.Fatal(err)
			}
			defer held.Unlock(context.Background())
			r := dlockRun(t, nil, "run", "--redis", aclURL(t, tc.rules), "-w", "20s", k, "--", "echo", "ran")
			if r.code != exitFailed || strings.Contains(r.stdout, "ran") {
				t.Fatalf("want exit %d without running the command; %v", exitFailed, r)
			}
			t.Log(r.stderr)
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], "refuses a "+tc.what) {
				t.Fatalf("want one line naming the refused %s; %v", tc.what, r)
			}
		})
	}
}
