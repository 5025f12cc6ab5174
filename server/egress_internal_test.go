package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/testbound"
)

func TestBlockedAddr(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1": true, "127.9.9.9": true, "::1": true, "10.1.2.3": true, "172.16.0.1": true,
		"192.168.1.1": true, "169.254.169.254": true, "100.100.100.200": true, "0.0.0.0": true,
		"::": true, "fe80::1": true, "fd00:ec2::254": true, "fc00::1": true, "::ffff:127.0.0.1": true,
		"::ffff:10.0.0.1": true, "64:ff9b::a00:1": true, "224.0.0.1": true, "255.255.255.255": true,
		"198.18.0.1": true, "240.0.0.1": true,
		"93.184.216.34": false, "8.8.8.8": false, "2606:4700::1111": false, "100.128.0.1": false,
	} {
		if got := blockedAddr(netip.MustParseAddr(addr), nil); got != want {
			t.Errorf("%s: blocked %v, want %v", addr, got, want)
		}
	}
	allow := []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}
	if blockedAddr(netip.MustParseAddr("10.1.2.3"), allow) || !blockedAddr(netip.MustParseAddr("10.2.0.1"), allow) {
		t.Error("allow list not applied exactly")
	}
}

// The guard runs on the address being dialled, after resolution: a name
// that resolves to loopback is refused as 127.0.0.1 is.
func TestEgressGuardAtConnect(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	rx := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer rx.Close()
	port := rx.Listener.Addr().(interface{ AddrPort() netip.AddrPort }).AddrPort().Port()
	c := newEgressClient(5*time.Second, nil)
	for _, u := range []string{rx.URL, "http://localhost:" + itoa(int(port)) + "/x", "http://[::ffff:127.0.0.1]:" + itoa(int(port)) + "/"} {
		_, err := c.Get(u)
		if !errors.Is(err, errBlockedAddress) {
			t.Errorf("%s: %v, want the guard's refusal", u, err)
		}
	}
	if hits.Load() != 0 {
		t.Errorf("receiver reached %d times", hits.Load())
	}
	// Control stub: a resolver answer that changes between check and
	// connect does not matter, the check is on the connected address.
	ctl := guardControl(nil)
	if err := ctl("tcp4", "169.254.169.254:80", nil); !errors.Is(err, errBlockedAddress) {
		t.Errorf("metadata: %v", err)
	}
	if err := ctl("tcp4", "93.184.216.34:443", nil); err != nil {
		t.Errorf("public: %v", err)
	}
}

type records map[string]captchaq.Record

func (r records) Get(_ context.Context, id string) (captchaq.Record, error) { return r[id], nil }

func newTestSender(t *testing.T, parallel int, allow []netip.Prefix) *pingbackSender {
	ps := newPingbackSender(pingbackParams{timeout: 10 * time.Second, attempts: 1, parallel: parallel, allow: allow, log: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		ps.close(ctx)
	})
	return ps
}

func waitCount(t *testing.T, ps *pingbackSender, outcome string, n float64) {
	t.Helper()
	if !testbound.Eventually(func() bool { return testutil.ToFloat64(ps.metrics.WithLabelValues(outcome)) >= n }) {
		t.Fatalf("%s pingbacks: %v, want %v", outcome, testutil.ToFloat64(ps.metrics.WithLabelValues(outcome)), n)
	}
}

func itoa(n int) string {
	return netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(n)).String()[len("0.0.0.0:"):]
}

func TestPingbackLoopbackRefusedByDefault(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	rx := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer rx.Close()
	ps := newTestSender(t, 1, nil)
	st := records{"qa/1": {Task: captchaq.Task{ID: "qa/1", Pingback: rx.URL + "/internal/admin"}}}
	ps.enqueue(st, captchaq.Result{ID: "qa/1", Status: captchaq.StatusSolved, Token: "T"}, "1")
	waitCount(t, ps, "failed", 1)
	if hits.Load() != 0 || testutil.ToFloat64(ps.metrics.WithLabelValues("sent")) != 0 {
		t.Errorf("loopback receiver reached: %d", hits.Load())
	}
}

func TestPingbackRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	var inner atomic.Int32
	in := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { inner.Add(1) }))
	defer in.Close()
	out := httptest.NewServer(http.RedirectHandler(in.URL+"/admin", http.StatusTemporaryRedirect))
	defer out.Close()
	ps := newTestSender(t, 1, testLoopback)
	st := records{"qa/1": {Task: captchaq.Task{ID: "qa/1", Pingback: out.URL + "/hook"}}}
	ps.enqueue(st, captchaq.Result{ID: "qa/1", Status: captchaq.StatusSolved, Token: "T"}, "1")
	waitCount(t, ps, "failed", 1)
	if inner.Load() != 0 {
		t.Errorf("redirect followed %d times", inner.Load())
	}
}

var testLoopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// One client's receiver hanging does not hold another client's pingback.
func TestPingbackQueuesPerClient(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(release)
	fastHit := make(chan struct{}, 1)
	fast := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { fastHit <- struct{}{} }))
	defer fast.Close()
	ps := newTestSender(t, 1, testLoopback)
	st := records{}
	for i := range 3 {
		id := "slow/" + itoa(i)
		st[id] = captchaq.Record{Task: captchaq.Task{ID: id, Pingback: slow.URL}}
	}
	st["fast/1"] = captchaq.Record{Task: captchaq.Task{ID: "fast/1", Pingback: fast.URL}}
	for i := range 3 {
		ps.enqueue(st, captchaq.Result{ID: "slow/" + itoa(i), Status: captchaq.StatusSolved}, itoa(i))
	}
	ps.enqueue(st, captchaq.Result{ID: "fast/1", Status: captchaq.StatusSolved}, "1")
	select {
	case <-fastHit:
	case <-time.After(20 * time.Second):
		t.Fatal("the fast client's pingback waited behind the slow client's")
	}
}

func TestScrubURLs(t *testing.T) {
	t.Parallel()
	in := `submit: Post "http://10.0.0.5:8080/in.php": dial tcp 10.0.0.5:8080: connect: connection refused (see https://api.example/res.php?key=x)`
	got := scrubURLs(in)
	if strings.Contains(got, "10.0.0.5") || strings.Contains(got, "api.example") || !strings.Contains(got, "(the provider)") {
		t.Errorf("scrubbed: %q", got)
	}
	r := scrubResult(captchaq.Result{Error: in, ErrorCode: "NETWORK"})
	if r.Error != got || r.ErrorCode != "NETWORK" {
		t.Errorf("result: %+v", r)
	}
}

// A provider name the resolver cannot find is the operator's business
// too: Go's DNS errors read "dial tcp: lookup HOST on RESOLVER:53".
func TestScrubURLsHidesLookups(t *testing.T) {
	t.Parallel()
	in := `getbalance: balance: NETWORK: cannot reach the provider: Get "(the provider)": dial tcp: lookup api.provider.invalid on 10.255.255.53:53: no such host`
	want := `getbalance: balance: NETWORK: cannot reach the provider: Get "(the provider)": dial tcp: (the provider): no such host`
	if got := scrubURLs(in); got != want {
		t.Errorf("scrubbed:\n %q\nwant\n %q", got, want)
	}
	in = `read udp 10.0.0.2:41000->10.255.255.53:53: i/o timeout`
	if got := scrubURLs(in); strings.Contains(got, "10.255.255.53") {
		t.Errorf("scrubbed: %q", got)
	}
}

// A --public-url without a scheme made every submit fail with a refusal
// that quotes the pingback URL, secret and all: what a client reads of it
// holds neither the host nor the secret.
func TestScrubURLsHidesSchemelessPingback(t *testing.T) {
	t.Parallel()
	const secret = "0123456789abcdef0123456789abcdef"
	pb := "captchaq.example.com:8080/pingback/" + secret
	in := "submit: INVALID_TASK: pingback: " + strconv.Quote(pb) + " has no scheme; add https:// (e.g. https://" + pb + ")"
	want := `submit: INVALID_TASK: pingback: "(the server's pingback URL)" has no scheme; add https:// (e.g. (the server's pingback URL))`
	if got := scrubURLs(in); got != want {
		t.Errorf("scrubbed:\n %q\nwant\n %q", got, want)
	}
	for in, want := range map[string]string{
		`dial captchaq.example.com:8080 failed`:           `dial (the provider) failed`,
		`cannot reach "10.0.0.7:5672/vhost"`:              `cannot reach "(the provider)"`,
		`cannot reach localhost:8080/x`:                   `cannot reach (the provider)`,
		`cannot reach [fd00::1]:443`:                      `cannot reach (the provider)`,
		`at /pingback/` + secret + ` (relative)`:          `at (the server's pingback URL) (relative)`,
		`pageurl: "shop.example/x" has no scheme`:         `pageurl: "shop.example/x" has no scheme`,
		`min_score: "0.3:1" is not a score; at 12:40:19Z`: `min_score: "0.3:1" is not a score; at 12:40:19Z`,
	} {
		if got := scrubURLs(in); got != want {
			t.Errorf("scrubURLs(%q) = %q, want %q", in, got, want)
		}
	}
}
