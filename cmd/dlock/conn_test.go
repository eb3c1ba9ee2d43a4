package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

const secret = "s3cret-Pa55word"

// TestUnreachableAndBadURLs: every command exits 125 with a message that
// names the address and never the password.
func TestUnreachableAndBadURLs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		flagURL string   // --redis
		env     []string // extra environment
		mention []string // in stderr
		// inProcess: no URL at all, so the command runs in this process
		// with the default at deadAddr (see inProcessEnv).
		inProcess bool
	}{
		{"unreachable", "redis://user:" + secret + "@" + deadAddr + "/0", nil,
			[]string{deadAddr, "from --redis", "user:xxxxx@", "connection refused"}, false},
		{"unreachable TLS", "rediss://:" + secret + "@" + deadAddr + "/2", nil,
			[]string{deadAddr, "rediss://:xxxxx@"}, false},
		{"from DLOCK_REDIS_URL", "", []string{"DLOCK_REDIS_URL=redis://:" + secret + "@" + deadAddr + "/0",
			"REDIS_URL=redis://127.0.0.1:9/0"}, []string{deadAddr, "$DLOCK_REDIS_URL"}, false},
		{"from REDIS_URL", "", []string{"REDIS_URL=redis://:" + secret + "@" + deadAddr + "/0"},
			[]string{deadAddr, "$REDIS_URL"}, false},
		{"default", "", nil, []string{deadAddr, "the default", "--redis"}, true},
		{"bad port with password", "redis://u:" + secret + "@127.0.0.1:notaport/0", nil,
			[]string{"invalid Redis URL", "u:xxxxx@127.0.0.1:notaport", "invalid port"}, false},
		{"password with a slash", "redis://u:ab/" + secret + "@127.0.0.1:6390/0", nil,
			[]string{"invalid Redis URL", "u:xxxxx@"}, false},
		{"bad scheme", "http://u:" + secret + "@127.0.0.1/0", nil, []string{"unsupported scheme", "http://u:xxxxx@"}, false},
		{"not a URL", secret + "@localhost", nil, []string{"not a URL"}, false},
		{"bad db", "redis://:" + secret + "@127.0.0.1:6390/zero", nil, []string{"invalid database number"}, false},
		{"unknown option", "redis://:" + secret + "@127.0.0.1:6390/0?colour=blue", nil, []string{"colour"}, false},
		{"query password", "redis+sentinel://" + deadAddr + "/0?master_name=mymaster&password=" + secret +
			"&dial_timeout=100ms", nil, []string{`master "mymaster" via Sentinel ` + deadAddr, "password=xxxxx"}, false},
		{"cluster", "redis+cluster://:" + secret + "@" + deadAddr + "?dial_timeout=100ms", nil,
			[]string{"Cluster " + deadAddr}, false},
	}
	// The built binary runs the first command of each case; the others
	// share its connection code and run in this process, which saves
	// starting a race-enabled binary for each.
	commands := [][]string{
		{"run", "k", "true"}, {"status", "k"}, {"list"}, {"release", "k", "--force"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for i, cmd := range commands {
				args := cmd
				if tc.flagURL != "" {
					args = append([]string{"--redis", tc.flagURL}, cmd...)
				}
				var r result
				if tc.inProcess || i > 0 {
					r = inProcessEnv(append(tc.env, pathEnv()), args...)
				} else {
					r = dlockRun(t, tc.env, args...)
				}
				expectCode(t, r, 125)
				expectStderr(t, r, tc.mention...)
				if strings.Contains(r.stderr+r.stdout, secret) || strings.Contains(r.stderr, "Pa55") {
					t.Errorf("dlock %v printed the password:\n%v", cmd, r)
				}
				if strings.Contains(r.stderr, "private") {
					t.Errorf("dlock %v mentions a private server:\n%v", cmd, r)
				}
			}
		})
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://127.0.0.1:6379/0":                            "redis://127.0.0.1:6379/0",
		"redis://user:pw@host:1/2":                            "redis://user:xxxxx@host:1/2",
		"redis://:pw@host":                                    "redis://:xxxxx@host",
		"redis://user@host":                                   "redis://user@host",
		"rediss://u:p%40ss@host/0?dial_timeout=3s":            "rediss://u:xxxxx@host/0?dial_timeout=3s",
		"redis://h/0?master_name=m&password=pw&addr=h2:26379": "redis://h/0?master_name=m&password=xxxxx&addr=h2:26379",
		"redis://u:pa/ss@host:1/0":                            "redis://u:xxxxx@host:1/0",
		"redis://u:p w@host:x?sentinel_password=zz":           "redis://u:xxxxx@host:x?sentinel_password=xxxxx",
		"u:pw@host":                        "xxxxx",
		"unix://u:pw@/run/redis.sock?db=1": "unix://u:xxxxx@/run/redis.sock?db=1",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRedactor(t *testing.T) {
	r := &redactor{}
	r.addURL("redis://u:p%40ssw0rd@host/0?password=other-secret")
	msg := r.clean("failed: p@ssw0rd and p%40ssw0rd and other-secret")
	if strings.Contains(msg, "ssw0rd") || strings.Contains(msg, "other-secret") {
		t.Errorf("clean left a secret: %q", msg)
	}
	r.addURL("redis://u:ab@host") // too short to mask inside text
	if got := r.clean("abc"); got != "abc" {
		t.Errorf("short secret garbled the text: %q", got)
	}
}

func TestParseEndpoint(t *testing.T) {
	cases := []struct {
		url, kind string
		addrs     []string
		master    string
	}{
		{"redis://127.0.0.1:6380/1", "server", []string{"127.0.0.1:6380"}, ""},
		{"redis://h", "server", []string{"h:6379"}, ""},
		{"rediss://u:p@h:6390/0", "server", []string{"h:6390"}, ""},
		{"unix:///tmp/redis.sock?db=2", "server", []string{"/tmp/redis.sock"}, ""},
		{"redis://s1:26379/0?master_name=mymaster&addr=s2:26379", "sentinel", []string{"s1:26379", "s2:26379"}, "mymaster"},
		{"redis+sentinel://s1:26379/0?master_name=m", "sentinel", []string{"s1:26379"}, "m"},
		{"rediss+sentinel://s1:26379?master_name=m", "sentinel", []string{"s1:26379"}, "m"},
		{"redis+cluster://n1:7000?addr=n2:7001&addr=n3:7002", "cluster", []string{"n1:7000", "n2:7001", "n3:7002"}, ""},
		{"REDIS+CLUSTER://n1:7000", "cluster", []string{"n1:7000"}, ""},
	}
	for _, tc := range cases {
		e, err := parseEndpoint(target{url: tc.url, source: "--redis"})
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		if e.kind != tc.kind || !slices.Equal(e.addrs, tc.addrs) || e.master != tc.master {
			t.Errorf("%s: kind %s addrs %v master %q; want %s %v %q", tc.url, e.kind, e.addrs, e.master, tc.kind, tc.addrs, tc.master)
		}
		if rdb := e.newClient(); rdb == nil {
			t.Errorf("%s: no client", tc.url)
		} else {
			_ = rdb.Close()
		}
	}
	for _, bad := range []string{
		"localhost:6379", "http://h", "redis+sentinel://h/0", "redis+ring://h", "unix+cluster:///x",
		"redis://h/0?nosuchoption=1", "redis://h/a/b", "redis://h:port",
	} {
		if _, err := parseEndpoint(target{url: bad, source: "--redis"}); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

func TestParseHelpers(t *testing.T) {
	for in, want := range map[string]time.Duration{"5": 5 * time.Second, "0.5": 500 * time.Millisecond,
		"250ms": 250 * time.Millisecond, "1m": time.Minute, "0": 0} {
		if got, err := parseDuration(in); err != nil || got != want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"-1", "-1s", "soon", ""} {
		if _, err := parseDuration(bad); err == nil {
			t.Errorf("parseDuration(%q): no error", bad)
		}
	}
	fs := newFlagSet("x")
	var j bool
	var tok string
	fs.BoolVar(&j, "json", false, "")
	fs.StringVar(&tok, "token", "", "")
	pos, err := parseInterspersed(fs, []string{"a", "--json", "b", "--token", "t", "--", "--c", "-d"})
	if err != nil || !j || tok != "t" || !slices.Equal(pos, []string{"a", "b", "--c", "-d"}) {
		t.Errorf("parseInterspersed: %v %v %q %v", pos, j, tok, err)
	}
}

// TestTLSToPlainServer: a rediss:// URL for a server that does not serve
// TLS (it reads the handshake as a command and answers nothing) is
// reported as a TLS handshake that did not complete, naming the address,
// not as a bare deadline.
func TestTLSToPlainServer(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"status", testKey(t)}, {"run", testKey(t), "true"}} {
		r := dlockRun(t, nil, append([]string{"--redis", "rediss://" + srv.Addr()}, args...)...)
		expectCode(t, r, 125)
		expectStderr(t, r, "TLS handshake with "+srv.Addr()+" did not complete", "may not serve TLS", "rediss://")
		if strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("want one line:\n%v", r)
		}
	}
}
