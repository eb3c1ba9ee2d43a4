package redlock

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/evictpolicy"
)

// checkPolicies reads the maxmemory-policy of every node whose policy is
// not known yet (each at most timeout, or ctx) and records a
// *dlock.EvictionError once one may evict, unless AllowEviction. It
// returns that error; nodes that did not answer are asked again next time.
func (p *Protocol) checkPolicies(ctx context.Context, timeout time.Duration) error {
	p.idMu.Lock()
	known := slices.Clone(p.policies)
	p.idMu.Unlock()
	var wg sync.WaitGroup
	for i, n := range p.nodes {
		if known[i] != "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			nodes := evictpolicy.ReadAll(ctx, n)
			switch ev := evictpolicy.Evicting(nodes); {
			case len(ev) > 0:
				known[i] = strings.Join(ev, ", ")
			case evictpolicy.Unreached(nodes) == nil:
				known[i] = "ok"
			}
		}()
	}
	wg.Wait()
	p.idMu.Lock()
	defer p.idMu.Unlock()
	var evicting []string
	for i, v := range known {
		if p.policies[i] == "" {
			p.policies[i] = v
		}
		if v := p.policies[i]; v != "" && v != "ok" {
			evicting = append(evicting, v)
		}
	}
	if len(evicting) > 0 && !p.opts.AllowEviction && p.evictErr == nil {
		p.evictErr = &dlock.EvictionError{Servers: evicting}
	}
	return p.evictErr
}

// refusal is why Acquire refuses to run: two nodes are one server, or a
// node may evict keys.
func (p *Protocol) refusal() error {
	if err := p.sameServer(); err != nil {
		return err
	}
	p.idMu.Lock()
	defer p.idMu.Unlock()
	return p.evictErr
}
