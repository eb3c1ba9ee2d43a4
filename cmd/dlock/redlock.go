package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/admin"
	"github.com/dlock-go/dlock/redlock"
	"github.com/redis/go-redis/v9"
)

// redlockClient is --redlock URL1,URL2,...: a dlock Client whose locks take
// a majority of independent masters (package redlock). Every URL is parsed
// like --redis; unreachable nodes are allowed as long as a majority answers
// a PING, since Redlock is built to survive a minority being down.
//
// adm is the admin Client of the first node, the one the dlock Client's
// own calls go to.
func (a *app) redlockClient(ctx context.Context, urls string, opts dlock.Options) (*dlock.Client, *redlock.Protocol, *admin.Client, func(), int) {
	var nodes []redis.UniversalClient
	closeAll := func() {
		for _, n := range nodes {
			_ = n.Close()
		}
	}
	var down []string
	list := splitURLs(urls)
	for _, u := range list { // every secret is known before any message
		a.redact.addURL(u)
	}
	for _, u := range list {
		e, err := parseEndpoint(target{u, "--redlock", a.tls})
		if err != nil {
			closeAll()
			a.errorf("invalid Redis URL %s (from --redlock): %v", e.display, err)
			return nil, nil, nil, nil, exitFailed
		}
		if e.kind != "server" {
			closeAll()
			a.errorf("--redlock %s: each node must be one independent master (redis:// or rediss://), not %s", e.display, e.kind)
			return nil, nil, nil, nil, exitFailed
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
		return nil, nil, nil, nil, exitFailed
	}
	for _, d := range down {
		a.errorf("--redlock: warning: node %s does not answer; a majority does", d)
	}
	c, p, err := redlock.NewClient(nodes, redlock.Options{}, opts)
	var adm *admin.Client
	if err == nil {
		if adm, err = adminOf(nodes[0], c); err == nil {
			err = p.CheckServers(ctx)
		}
		if err != nil {
			_ = c.Close()
		}
	}
	if err != nil {
		closeAll()
		code := exitFailed
		if errors.Is(err, dlock.ErrInvalidArgument) {
			code = exitUsage
		}
		msg := libMsg(err)
		if errors.Is(err, dlock.ErrEvictionPolicy) {
			msg = evictionMsg(err)
		}
		a.errorf("--redlock: %s", msg)
		return nil, nil, nil, nil, code
	}
	return c, p, adm, closeAll, exitOK
}

// schemeStart matches the start of a URL: "scheme://".
var schemeStart = regexp.MustCompile(`^\s*[A-Za-z][A-Za-z0-9+.-]*://`)

// splitURLs splits a comma-separated list of URLs only at the commas that
// start another URL (followed by "scheme://"), so a comma inside a
// password or a query stays in its URL.
func splitURLs(urls string) []string {
	var out []string
	start := 0
	for i := 0; i < len(urls); i++ {
		if urls[i] == ',' && schemeStart.MatchString(urls[i+1:]) {
			out = append(out, strings.TrimSpace(urls[start:i]))
			start = i + 1
		}
	}
	return append(out, strings.TrimSpace(urls[start:]))
}

// redactURLs masks the passwords of a comma-separated URL list.
func redactURLs(urls string) string {
	parts := splitURLs(urls)
	for i, u := range parts {
		parts[i] = redactURL(u)
	}
	return strings.Join(parts, ",")
}
