package redistest

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is an in-process TCP proxy on a free loopback port that forwards every
// accepted connection to a fixed target address, with knobs for fault
// injection: added latency, a silent network cut (blackhole) and abrupt
// connection resets. It works in front of any TCP service, not only Redis.
//
// All methods are safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	latency   atomic.Int64 // time.Duration added to each forwarded chunk
	blackhole atomic.Bool  // drop all traffic while true

	ctx    context.Context // cancelled by Close; aborts dials to the target
	cancel context.CancelFunc

	mu     sync.Mutex
	links  map[*link]struct{} // live proxied connections
	closed bool

	wg sync.WaitGroup // accept loop and connection handlers
}

// NewProxy starts a proxy listening on 127.0.0.1:0 (a free port) that
// forwards to target (host:port). t.Cleanup closes it. A listen failure fails
// the test.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: proxy listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{ln: ln, target: target, ctx: ctx, cancel: cancel, links: make(map[*link]struct{})}
	p.wg.Add(1)
	go p.acceptLoop()
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// Addr returns the address clients should dial, "127.0.0.1:port".
func (p *Proxy) Addr() string {
	return p.ln.Addr().String()
}

// SetLatency makes the proxy hold every chunk of data it forwards, in both
// directions, for at least d after reading it before writing it on (so a
// request/response round trip gains at least 2*d). Order is preserved and
// throughput is not otherwise limited. 0 (the default) means no added delay.
// The new value applies to data read after the call.
func (p *Proxy) SetLatency(d time.Duration) {
	if d < 0 {
		d = 0
	}
	p.latency.Store(int64(d))
}

// Blackhole turns the blackhole on or off. While on, the proxy keeps accepting
// connections and reading from both sides but forwards nothing in either
// direction: data read (or still queued by SetLatency) meanwhile is discarded,
// and no connection is closed or reset. To the client this looks like a
// network cut without RST: requests simply time out. Because bytes are
// discarded, a connection used during a blackhole is left mid-stream; clients
// such as go-redis drop connections that timed out, and CutAll can be used to
// clear the rest. New connections accepted while on are still connected to
// the target (nothing is forwarded over them until it is turned off).
func (p *Proxy) Blackhole(on bool) {
	p.blackhole.Store(on)
}

// CutAll abruptly closes every current proxied connection, on both sides,
// with an RST (SO_LINGER 0). The proxy keeps accepting new connections.
func (p *Proxy) CutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.links {
		l.close(true)
	}
}

// Close stops accepting, resets every current connection and waits for all
// proxy goroutines to finish. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.cancel()
	err := p.ln.Close()
	for l := range p.links {
		l.close(true)
	}
	p.mu.Unlock()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// acceptLoop accepts client connections until the listener is closed.
func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // e.g. EMFILE: back off and retry
			continue
		}
		p.wg.Add(1) // safe: this goroutine's own count keeps the counter > 0
		go p.handle(c)
	}
}

// handle connects a client connection to the target and shuttles data both
// ways until both directions are done or the link is cut.
func (p *Proxy) handle(client net.Conn) {
	defer p.wg.Done()
	d := net.Dialer{Timeout: 5 * time.Second}
	server, err := d.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		abort(client)
		return
	}
	l := &link{client: client, server: server, done: make(chan struct{})}

	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.close(true)
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(l, client, server) }()
	go func() { defer wg.Done(); p.pipe(l, server, client) }()
	wg.Wait()
	l.close(false)

	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// chunk is data read from one side, to be written to the other side no
// earlier than at.
type chunk struct {
	data []byte
	at   time.Time
}

// pipe forwards src to dst for link l. A reader loop feeds a bounded queue and
// a writer goroutine delivers each chunk once its latency has elapsed, so
// latency does not throttle throughput. When src reaches EOF the write side
// of dst is shut down (half-close); any other error tears down the link.
func (p *Proxy) pipe(l *link, src, dst net.Conn) {
	queue := make(chan chunk, 64)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for c := range queue { // always drain so the reader never blocks forever
			if l.isClosed() {
				continue
			}
			if d := time.Until(c.at); d > 0 {
				timer := time.NewTimer(d)
				select {
				case <-timer.C:
				case <-l.done:
					timer.Stop()
					continue
				}
			}
			if p.blackhole.Load() {
				continue
			}
			if _, err := dst.Write(c.data); err != nil {
				l.close(true)
			}
		}
	}()

	buf := make([]byte, 32*1024)
	var readErr error
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.blackhole.Load() {
			now := time.Now()
			queue <- chunk{
				data: append([]byte(nil), buf[:n]...),
				at:   now.Add(time.Duration(p.latency.Load())),
			}
		}
		if err != nil {
			readErr = err
			break
		}
	}
	close(queue)
	<-writerDone

	if errors.Is(readErr, io.EOF) && !l.isClosed() {
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
			return
		}
	}
	l.close(!errors.Is(readErr, io.EOF))
}

// link is one proxied connection: the accepted client side and the dialed
// server side.
type link struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{} // closed when the link is torn down
}

// close tears the link down once. With reset, both sockets are closed with
// SO_LINGER 0 so the peers see an RST instead of a FIN.
func (l *link) close(reset bool) {
	l.once.Do(func() {
		close(l.done)
		if reset {
			abort(l.client)
			abort(l.server)
			return
		}
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// isClosed reports whether the link has been torn down.
func (l *link) isClosed() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// abort closes c, with an RST if it is a TCP connection.
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
