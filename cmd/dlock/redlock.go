package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redlock"
	"github.com/redis/go-redis/v9"
)

// redlockClient is --redlock URL1,URL2,...: a dlock Client whose locks take
// a majority of independent masters (package redlock). Every URL is parsed
// like --redis; unreachable nodes are allowed as long as a majority answers
// a PING, since Redlock is built to survive a minority being down.
func (a *app) redlockClient(ctx context.Context, urls string, opts dlock.Options) (*dlock.Client, *redlock.Protocol, func(), int) {
	var nodes []redis.UniversalClient
	closeAll := func() {
		for _, n := range nodes {
			_ = n.Close()
		}
	}
	var down []string
	for _, u := range strings.Split(urls, ",") {
		u = strings.TrimSpace(u)
		a.redact.addURL(u)
		e, err := parseEndpoint(target{u, "--redlock"})
		if err != nil {
			closeAll()
			a.errorf("invalid Redis URL %s (from --redlock): %v", e.display, err)
			return nil, nil, nil, exitFailed
		}
		if e.kind != "server" {
			closeAll()
			a.errorf("--redlock %s: each node must be one independent master (redis:// or rediss://), not %s", e.display, e.kind)
			return nil, nil, nil, exitFailed
		}
		rdb := e.newClient()
		if err := ping(ctx, rdb); err != nil {
			down = append(down, fmt.Sprintf("%s (%v)", e.where(), err))
		}
		nodes = append(nodes, rdb)
	}
	if len(down) > 0 && len(nodes)-len(down) <= len(nodes)/2 {
		closeAll()
		a.errorf("--redlock: no majority of the %d nodes answers: %s", len(nodes), strings.Join(down, "; "))
		return nil, nil, nil, exitFailed
	}
	for _, d := range down {
		a.errorf("--redlock: warning: node %s does not answer; a majority does", d)
	}
	c, p, err := redlock.NewClient(nodes, redlock.Options{}, opts)
	if err != nil {
		closeAll()
		a.errorf("--redlock: %v", err)
		return nil, nil, nil, exitFailed
	}
	return c, p, closeAll, exitOK
}

// redactURLs masks the passwords of a comma-separated URL list.
func redactURLs(urls string) string {
	parts := strings.Split(urls, ",")
	for i, u := range parts {
		parts[i] = redactURL(strings.TrimSpace(u))
	}
	return strings.Join(parts, ",")
}
