package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The body budgets, as metrics label them.
const (
	// budgetClients: bodies whose client is known before they are read
	// (the API's; in.php and res.php with key= in the query string).
	budgetClients = "clients"
	// budgetKeyless: the front's bodies whose key is only inside them.
	budgetKeyless = "keyless"
)

// Why a body was cut short, as metrics label it.
const (
	refusedShare    = "share"    // its address's share of keyless bytes is full
	refusedBudget   = "budget"   // the budget shared by all is full
	refusedDeadline = "deadline" // a keyless body did not arrive in time
)

// bodyBudget bounds the request bodies being read. Bytes are counted as
// they arrive, not as a Content-Length declares them, so a body trickled
// in holds only what came; and each body gives its bytes back once read.
//
//   - A client's bodies take their first MaxBodyPerClient bytes from the
//     client's own share, which no other client can take, and the rest
//     from a pool of MaxBodyInflight bytes shared by all clients. A
//     client within its own share is never refused for another's bytes.
//   - Bodies whose key is only inside them (in.php and res.php posted
//     with the key in the body, as the 2captcha libraries do) take at
//     most MaxBodyPerAddress bytes from one source address (IPv6 by /64)
//     out of a pool of MaxBodyInflight of their own, and must arrive
//     within KeylessBodyTimeout. So no one without a key can hold the
//     room of those with one, nor one address everyone's.
type bodyBudget struct {
	perClient, pool, perAddr int64
	keylessTimeout           time.Duration

	clients, keyless gauge // pooled bytes, beyond the clients' own shares for clients
	held             [2]atomic.Int64

	mu    sync.Mutex
	addrs map[netip.Prefix]*addrShare

	refused *prometheus.CounterVec
}

// addrShare is one source address's keyless bytes, and the bodies using
// it (the entry goes when none does).
type addrShare struct {
	g     gauge
	users int
}

func newBodyBudget(cfg Config) *bodyBudget {
	return &bodyBudget{
		perClient: cfg.MaxBodyPerClient, pool: cfg.MaxBodyInflight, perAddr: cfg.MaxBodyPerAddress,
		keylessTimeout: cfg.KeylessBodyTimeout,
		addrs:          map[netip.Prefix]*addrShare{},
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "captchaq_http_bodies_refused_total",
			Help: "Request bodies cut short while being read, by budget (clients, keyless) and reason (share: the source address's share; budget: the shared pool; deadline: a keyless body too slow).",
		}, []string{"budget", "reason"}),
	}
}

// collectors are the budget's metrics.
func (b *bodyBudget) collectors() []prometheus.Collector {
	held := func(i int, name string) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "captchaq_http_body_bytes",
			Help:        "Bytes of request bodies being read now, by budget (clients, keyless).",
			ConstLabels: prometheus.Labels{"budget": name},
		}, func() float64 { return float64(b.held[i].Load()) })
	}
	return []prometheus.Collector{b.refused, held(0, budgetClients), held(1, budgetKeyless)}
}

// errBodiesBusy matches every refusal of a body for want of room.
var errBodiesBusy = errors.New("request bodies in flight at the server's limit")

// bodyRefusal is a body cut short for want of room; Error says whose room.
type bodyRefusal struct{ msg string }

func (e *bodyRefusal) Error() string        { return e.msg }
func (e *bodyRefusal) Is(target error) bool { return target == errBodiesBusy }

// errBodyTooSlow: a keyless body did not arrive within KeylessBodyTimeout.
var errBodyTooSlow = errors.New("request body too slow")

// meteredBody is a request body whose bytes are charged to a budget as
// they are read. A refused charge, or the read deadline, ends the body
// with an error that says which (errBodiesBusy, errBodyTooSlow).
type meteredBody struct {
	io.ReadCloser
	charge func(n int64) error
	err    error // the refusal or timeout that ended it
}

func (m *meteredBody) Read(p []byte) (int, error) {
	if m.err != nil {
		return 0, m.err
	}
	n, err := m.ReadCloser.Read(p)
	if n > 0 {
		if cerr := m.charge(int64(n)); cerr != nil {
			m.err = cerr
			return 0, cerr
		}
	}
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		m.err = errBodyTooSlow
		return n, m.err
	}
	return n, err
}

// cutShort is called once a body was cut short (refused or too slow):
// the rest of it is not read, so the HTTP/1 connection ends after the
// answer. Connection: close keeps net/http from reading the rest before
// answering; the read deadline, passed already, keeps it from reading
// the rest after answering (it discards up to 256 KiB of a body before
// it closes a connection, for as long as the sender takes, within the
// read deadline: KeylessBodyTimeout, or the http.Server's ReadTimeout).
func cutShort(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 {
		w.Header().Set("Connection", "close")
		// Not every ResponseWriter can (a recorder in tests).
		_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	}
}

// clientBody meters r's body against cs's share and the clients' pool.
// The returned release gives the bytes back; call it once the body is
// read.
func (s *deps) clientBody(r *http.Request, cs *clientState) (*meteredBody, func()) {
	b := s.budget
	var own, pooled int64
	m := &meteredBody{ReadCloser: r.Body, charge: func(n int64) error {
		mine := cs.bodyShare.takeUpTo(n, b.perClient)
		if rest := n - mine; rest > 0 && !b.clients.take(rest, b.pool) {
			cs.bodyShare.give(mine)
			b.refused.WithLabelValues(budgetClients, refusedBudget).Inc()
			return &bodyRefusal{fmt.Sprintf("the clients' request bodies being read fill the server's %d bytes, and client %q is past its own %d: try again shortly", b.pool, cs.Name, b.perClient)}
		}
		own += mine
		pooled += n - mine
		b.held[0].Add(n)
		return nil
	}}
	r.Body = m
	return m, func() {
		cs.bodyShare.give(own)
		b.clients.give(pooled)
		b.held[0].Add(-(own + pooled))
	}
}

// keylessBody meters r's body against its source address's share and the
// keyless pool, and gives it KeylessBodyTimeout to arrive. The returned
// release gives the bytes back; call it once the body is read.
func (s *deps) keylessBody(w http.ResponseWriter, r *http.Request) (*meteredBody, func()) {
	b := s.budget
	// Not every ResponseWriter can (a recorder in tests): then the
	// server's ReadTimeout bounds the body.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(b.keylessTimeout))
	addr := sourcePrefix(r.RemoteAddr)
	b.mu.Lock()
	share := b.addrs[addr]
	if share == nil {
		share = &addrShare{}
		b.addrs[addr] = share
	}
	share.users++
	b.mu.Unlock()
	var held int64
	m := &meteredBody{ReadCloser: r.Body, charge: func(n int64) error {
		if !share.g.take(n, b.perAddr) {
			b.refused.WithLabelValues(budgetKeyless, refusedShare).Inc()
			return &bodyRefusal{fmt.Sprintf("this address is sending %d bytes of request bodies whose key is only inside them, its share: send key= in the query string, or fewer at once", b.perAddr)}
		}
		if !b.keyless.take(n, b.pool) {
			share.g.give(n)
			b.refused.WithLabelValues(budgetKeyless, refusedBudget).Inc()
			return &bodyRefusal{fmt.Sprintf("the server is reading %d bytes of request bodies whose key is only inside them, its limit: send key= in the query string, or try again shortly", b.pool)}
		}
		held += n
		b.held[1].Add(n)
		return nil
	}}
	r.Body = m
	return m, func() {
		share.g.give(held)
		b.keyless.give(held)
		b.held[1].Add(-held)
		b.mu.Lock()
		if share.users--; share.users == 0 {
			delete(b.addrs, addr)
		}
		b.mu.Unlock()
		if m.err == errBodyTooSlow {
			b.refused.WithLabelValues(budgetKeyless, refusedDeadline).Inc()
		}
	}
}

// sourcePrefix is the source a share is kept for: the address of
// remoteAddr ("ip:port"), an IPv6 one as its /64 (one host's usual
// allotment). An address it cannot read shares one entry.
func sourcePrefix(remoteAddr string) netip.Prefix {
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return netip.Prefix{}
	}
	a := ap.Addr().Unmap()
	if a.Is4() {
		return netip.PrefixFrom(a, 32)
	}
	p, _ := a.Prefix(64)
	return p
}
