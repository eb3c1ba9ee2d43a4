package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// pingTimeout bounds the PING that checks a connection before use.
const pingTimeout = 5 * time.Second

// target is the Redis URL to use and where it came from.
type target struct {
	url    string
	source string  // "--redis", "$DLOCK_REDIS_URL", "$REDIS_URL" or "default"
	tls    tlsOpts // --tls-* flags (the URL's tls_* parameters take precedence)
}

func (t target) explicit() bool { return t.source != "default" }

// target resolves the URL: --redis, else $DLOCK_REDIS_URL, else $REDIS_URL,
// else redis://127.0.0.1:6379/0. Every candidate's secrets are registered
// with the redactor.
func (a *app) target() target {
	if a.redisURL != "" {
		return target{a.redisURL, "--redis", a.tls}
	}
	for _, env := range []string{"DLOCK_REDIS_URL", "REDIS_URL"} {
		if v := a.sys.getenv(env); v != "" {
			a.redact.addURL(v)
			return target{v, "$" + env, a.tls}
		}
	}
	return target{"redis://" + a.sys.defaultAddr + "/0", "default", a.tls}
}

// endpoint is a parsed Redis URL: how to make clients for it, and how to
// name it in messages without its password.
type endpoint struct {
	raw     string   // the URL as given (with its password: never print it)
	display string   // the URL with passwords masked
	source  string   // see target.source
	kind    string   // "server", "sentinel" or "cluster"
	addrs   []string // server address, Sentinel addresses or Cluster seed nodes
	master  string   // Sentinel master name
	tls     bool     // rediss: the connections start with a TLS handshake

	newClient func() redis.UniversalClient
	// pingClient, if set, is a client for the first PING that does not
	// retry, so a refused connection is reported at once.
	pingClient func() redis.UniversalClient
}

// where names the endpoint for messages: address(es), masked URL, source.
func (e *endpoint) where() string {
	var b strings.Builder
	switch e.kind {
	case "sentinel":
		fmt.Fprintf(&b, "master %q via Sentinel %s", e.master, strings.Join(e.addrs, ","))
	case "cluster":
		fmt.Fprintf(&b, "Cluster %s", strings.Join(e.addrs, ","))
	case "redlock":
		fmt.Fprintf(&b, "Redlock nodes %s", e.display)
		return b.String()
	default:
		b.WriteString(strings.Join(e.addrs, ","))
	}
	fmt.Fprintf(&b, " (%s, ", e.display)
	switch e.source {
	case "default":
		b.WriteString("the default: no --redis, $DLOCK_REDIS_URL or $REDIS_URL given)")
	case "private":
		b.WriteString("the private server of this run)")
	default:
		fmt.Fprintf(&b, "from %s)", e.source)
	}
	return b.String()
}

// parseEndpoint parses a Redis URL with go-redis's own parsers:
//
//	redis://, rediss://, unix://          redis.ParseURL (one server)
//	redis://...?master_name=M             redis.ParseFailoverURL (Sentinel)
//	redis+sentinel://, rediss+sentinel:// redis.ParseFailoverURL, scheme without "+sentinel"
//	redis+cluster://, rediss+cluster://   redis.ParseClusterURL, scheme without "+cluster"
func parseEndpoint(t target) (*endpoint, error) {
	e := &endpoint{raw: t.url, display: redactURL(t.url), source: t.source}
	scheme, rest, ok := strings.Cut(t.url, "://")
	if !ok {
		return e, errors.New("not a URL: want e.g. redis://host:6379/0")
	}
	if _, err := url.Parse(t.url); err != nil {
		return e, fmt.Errorf("not a valid URL: %s", urlErrorReason(err))
	}
	scheme = strings.ToLower(scheme)
	base, mode := scheme, ""
	if b, m, ok := strings.Cut(scheme, "+"); ok {
		base, mode = b, m
	}
	if base != "redis" && base != "rediss" && !(base == "unix" && mode == "") {
		return e, fmt.Errorf("unsupported scheme %q: want redis, rediss, unix, redis+sentinel or redis+cluster", scheme)
	}
	rest, topts, err := cutTLSParams(rest, t.tls)
	if err != nil {
		return e, err
	}
	if topts.set() && base != "rediss" {
		return e, fmt.Errorf("TLS options (tls_ca, tls_cert, tls_key, tls_server_name; --tls-*) need a rediss:// URL, not %s://", scheme)
	}
	tlsConf := func(c *tls.Config) (*tls.Config, error) { return topts.apply(c) }
	e.tls = base == "rediss"
	plain := base + "://" + rest
	if mode == "" && base != "unix" && hasQueryParam(t.url, "master_name") {
		mode = "sentinel"
	}
	switch mode {
	case "":
		o, err := redis.ParseURL(plain)
		if err != nil {
			return e, err
		}
		if o.TLSConfig, err = tlsConf(o.TLSConfig); err != nil {
			return e, err
		}
		e.kind, e.addrs = "server", []string{o.Addr}
		o.ContextTimeoutEnabled = true // every deadline dlock sets bounds the Redis call too
		e.newClient = func() redis.UniversalClient { return redis.NewClient(o) }
		e.pingClient = func() redis.UniversalClient {
			q := *o
			q.MaxRetries, q.DialerRetries = -1, 1
			return redis.NewClient(&q)
		}
	case "sentinel":
		o, err := redis.ParseFailoverURL(plain)
		if err != nil {
			return e, err
		}
		if o.MasterName == "" {
			return e, errors.New("a Sentinel URL needs ?master_name=NAME")
		}
		if o.TLSConfig, err = tlsConf(o.TLSConfig); err != nil {
			return e, err
		}
		e.kind, e.addrs, e.master = "sentinel", o.SentinelAddrs, o.MasterName
		o.ContextTimeoutEnabled = true
		e.newClient = func() redis.UniversalClient { return redis.NewFailoverClient(o) }
	case "cluster":
		o, err := redis.ParseClusterURL(plain)
		if err != nil {
			return e, err
		}
		if o.TLSConfig, err = tlsConf(o.TLSConfig); err != nil {
			return e, err
		}
		e.kind, e.addrs = "cluster", o.Addrs
		o.ContextTimeoutEnabled = true
		o.ClusterStateReloadInterval = 2 * time.Second // notice a failover's new slot owners soon
		e.newClient = func() redis.UniversalClient { return redis.NewClusterClient(o) }
	default:
		return e, fmt.Errorf("unsupported scheme %q: want redis, rediss, unix, redis+sentinel or redis+cluster", scheme)
	}
	return e, nil
}

func hasQueryParam(raw, name string) bool {
	_, q, ok := strings.Cut(raw, "?")
	if !ok {
		return false
	}
	v, err := url.ParseQuery(q)
	return err == nil && v.Has(name)
}

var quoted = regexp.MustCompile(`"[^"]*"`)

// urlErrorReason describes a url.Parse error without quoting the URL or
// any part of it (the part could be a piece of a password).
func urlErrorReason(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return quoted.ReplaceAllString(err.Error(), "(…)")
}

// connect parses the target URL and checks the connection with a PING.
// On failure it prints why, naming the address but no password, and
// returns exitFailed.
func (a *app) connect(ctx context.Context, t target) (*endpoint, redis.UniversalClient, int) {
	e, err := parseEndpoint(t)
	if err != nil {
		a.errorf("invalid Redis URL %s (from %s): %v", e.display, sourceName(t.source), err)
		return nil, nil, exitFailed
	}
	rdb := e.newClient()
	drvLog.lastLine()
	pinged := rdb
	if e.pingClient != nil {
		pinged = e.pingClient()
		defer pinged.Close()
	}
	if err := ping(ctx, pinged); err != nil {
		_ = rdb.Close()
		detail := err.Error()
		if l := drvLog.lastLine(); l != "" && !strings.Contains(l, detail) && !strings.Contains(detail, l) {
			detail += " (driver: " + l + ")"
		}
		switch {
		case e.tls && isTimeout(err):
			// A server without TLS reads the handshake as a command that
			// never ends, and answers nothing: say what was asked for.
			detail = fmt.Sprintf("the TLS handshake with %s did not complete (%s): the server may not serve TLS "+
				"(rediss:// asks for TLS; a server without it needs redis://)", strings.Join(e.addrs, ", "), detail)
			a.errorf("%s at %s: %s", pingFailure(err), e.where(), detail)
		case isTimeout(err):
			// Connected, or still dialling, but no reply: a paused or
			// overloaded server, or a filtered port.
			a.errorf("Redis at %s did not answer: no reply to PING within %v (%s)", e.where(), pingTimeout, detail)
		default:
			a.errorf("%s at %s: %s", pingFailure(err), e.where(), detail)
		}
		if !t.explicit() {
			fmt.Fprintln(a.stderr, "Give the Redis to use with --redis URL or $DLOCK_REDIS_URL / $REDIS_URL.")
		}
		return nil, nil, exitFailed
	}
	return e, rdb, exitOK
}

// isTimeout reports whether err is a deadline that passed or a network
// timeout.
func isTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || isNetTimeout(err)
}

// pingFailure names what a failed first PING means: a refused password, a
// database the server does not have, or no answer.
func pingFailure(err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "NOAUTH"), strings.Contains(msg, "WRONGPASS"),
		strings.Contains(msg, "invalid password"), strings.Contains(msg, "invalid username-password"):
		return "authentication failed"
	case strings.Contains(msg, "DB index is out of range"), strings.Contains(msg, "invalid DB index"):
		return "no such database"
	}
	return "cannot reach Redis"
}

// tlsOpts are the TLS settings beyond go-redis's own URL parameters: a CA
// file to verify the server with, a client certificate and key, and the
// name to expect in the server's certificate.
type tlsOpts struct {
	ca, cert, key, serverName string
}

func (o tlsOpts) set() bool { return o != tlsOpts{} }

// tlsParams maps the URL query parameters to the tlsOpts fields.
var tlsParams = []string{"tls_ca", "tls_cert", "tls_key", "tls_server_name"}

// cutTLSParams takes the tls_* parameters out of the query of rest (the
// URL after "scheme://"), over the defaults def.
func cutTLSParams(rest string, def tlsOpts) (string, tlsOpts, error) {
	o := def
	base, q, ok := strings.Cut(rest, "?")
	if !ok {
		return rest, o, nil
	}
	var keep []string
	for p := range strings.SplitSeq(q, "&") {
		k, v, _ := strings.Cut(p, "=")
		if !slices.Contains(tlsParams, k) {
			keep = append(keep, p)
			continue
		}
		v, err := url.QueryUnescape(v)
		if err != nil || v == "" {
			return rest, o, fmt.Errorf("bad value of %s", k)
		}
		switch k {
		case "tls_ca":
			o.ca = v
		case "tls_cert":
			o.cert = v
		case "tls_key":
			o.key = v
		case "tls_server_name":
			o.serverName = v
		}
	}
	if len(keep) > 0 {
		base += "?" + strings.Join(keep, "&")
	}
	return base, o, nil
}

// apply adds o to c (go-redis's TLS config of a rediss:// URL).
func (o tlsOpts) apply(c *tls.Config) (*tls.Config, error) {
	if !o.set() {
		return c, nil
	}
	if c == nil {
		c = &tls.Config{MinVersion: tls.VersionTLS12}
	} else {
		c = c.Clone()
	}
	if o.ca != "" {
		pem, err := os.ReadFile(o.ca)
		if err != nil {
			return nil, fmt.Errorf("TLS CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TLS CA file %s: no PEM certificate in it", o.ca)
		}
		c.RootCAs = pool
	}
	switch {
	case (o.cert == "") != (o.key == ""):
		return nil, errors.New("a TLS client certificate needs both tls_cert and tls_key (--tls-cert and --tls-key)")
	case o.cert != "":
		cert, err := tls.LoadX509KeyPair(o.cert, o.key)
		if err != nil {
			return nil, fmt.Errorf("TLS client certificate %s, key %s: %w", o.cert, o.key, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	if o.serverName != "" {
		c.ServerName = o.serverName
	}
	return c, nil
}

func sourceName(s string) string {
	if s == "default" {
		return "the default"
	}
	return s
}

func ping(ctx context.Context, rdb redis.UniversalClient) error {
	ctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	return rdb.Ping(ctx).Err()
}

// redactURL returns raw with the password of its userinfo and the values
// of query parameters whose name contains "password" replaced by "xxxxx".
// It works on URLs net/url rejects too, masking generously.
func redactURL(raw string) string {
	const mask = "xxxxx"
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		if strings.Contains(raw, "@") || strings.Contains(raw, ":") {
			return mask // not a URL at all: show nothing of it
		}
		return raw
	}
	if u, err := url.Parse(raw); err == nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), mask)
		}
		u.RawQuery = maskQuery(u.RawQuery)
		return u.String()
	}
	// Unparseable: everything up to the last '@' is userinfo.
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		user, _, hasPass := strings.Cut(rest[:at], ":")
		if hasPass {
			rest = user + ":" + mask + rest[at:]
		}
	}
	if base, q, ok := strings.Cut(rest, "?"); ok {
		rest = base + "?" + maskQuery(q)
	}
	return scheme + "://" + rest
}

// maskQuery masks the values of the parameters whose name contains
// "password", keeping the query as it was otherwise.
func maskQuery(q string) string {
	if q == "" {
		return q
	}
	parts := strings.Split(q, "&")
	for i, p := range parts {
		if k, _, ok := strings.Cut(p, "="); ok && strings.Contains(strings.ToLower(k), "password") {
			parts[i] = k + "=xxxxx"
		}
	}
	return strings.Join(parts, "&")
}

// redactor masks known secrets in messages. It learns them from every URL
// dlock was given, so even an error text from a library that quoted a
// password cannot print it.
type redactor struct {
	mu      sync.Mutex
	secrets []string // longest first
}

// minSecret is the shortest secret masked inside free text: shorter ones
// would garble messages, and display URLs are masked structurally anyway.
const minSecret = 4

func (r *redactor) addURL(raw string) {
	for _, s := range urlSecrets(raw) {
		r.add(s)
	}
}

func (r *redactor) add(s string) {
	if len(s) < minSecret {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if slices.Contains(r.secrets, s) {
		return
	}
	r.secrets = append(r.secrets, s)
	slices.SortFunc(r.secrets, func(a, b string) int { return len(b) - len(a) })
}

func (r *redactor) clean(s string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, sec := range r.secrets {
		s = strings.ReplaceAll(s, sec, "xxxxx")
	}
	return s
}

// urlSecrets returns the passwords in raw, raw and unescaped, whether or
// not raw parses.
func urlSecrets(raw string) []string {
	var out []string
	addBoth := func(s string) {
		out = append(out, s)
		if u, err := url.PathUnescape(s); err == nil && u != s {
			out = append(out, u)
		}
		if u, err := url.QueryUnescape(s); err == nil && u != s {
			out = append(out, u)
		}
	}
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		rest = raw
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if _, pass, ok := strings.Cut(rest[:at], ":"); ok {
			addBoth(pass)
		}
	}
	if u, err := url.Parse(raw); err == nil {
		if p, ok := u.User.Password(); ok {
			addBoth(p)
		}
	}
	if _, q, ok := strings.Cut(rest, "?"); ok {
		for p := range strings.SplitSeq(q, "&") {
			if k, v, ok := strings.Cut(p, "="); ok && strings.Contains(strings.ToLower(k), "password") {
				addBoth(v)
			}
		}
	}
	return out
}

// args returns the --tls-* flags that give o to another dlock.
func (o tlsOpts) args() []string {
	var args []string
	for _, f := range []struct{ name, v string }{{"tls-ca", o.ca}, {"tls-cert", o.cert}, {"tls-key", o.key}, {"tls-server-name", o.serverName}} {
		if f.v != "" {
			args = append(args, "--"+f.name, f.v)
		}
	}
	return args
}
