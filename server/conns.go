package server

import (
	"net"
	"net/netip"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Connection caps, the defaults of the Config fields of the same names.
const (
	MaxConnsDefault           = 2048
	MaxConnsPerAddressDefault = 256
)

// Listener returns l with the server's connection caps: at most
// Config.MaxConns connections open at once, and at most
// Config.MaxConnsPerAddress from one source address (IPv6 by /64). A
// connection past either is closed as soon as it is accepted, before any
// byte is read, and counted in captchaq_http_connections_refused_total;
// captchaq_http_connections_open counts the open ones. Serve the Handler
// on it (under TLS, wrap it: the caps are on the TCP connections).
//
// Each open connection costs a file descriptor and buffers (idle
// keep-alives included, until the http.Server's IdleTimeout): without a
// cap, one address can hold thousands.
func (s *Server) Listener(l net.Listener) net.Listener {
	return &capListener{Listener: l, overall: s.cfg.MaxConns, perAddr: s.cfg.MaxConnsPerAddress, byAddr: map[netip.Prefix]int{}, m: s.conns}
}

// connMetrics count the connections of the server's Listeners.
type connMetrics struct {
	open    prometheus.Gauge
	refused *prometheus.CounterVec
}

func newConnMetrics() *connMetrics {
	return &connMetrics{
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "captchaq_http_connections_open", Help: "Connections open on the server's capped listeners.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "captchaq_http_connections_refused_total",
			Help: "Connections closed at accept, by the cap they met (address: Config.MaxConnsPerAddress; overall: Config.MaxConns).",
		}, []string{"cap"}),
	}
}

func (m *connMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.open, m.refused}
}

type capListener struct {
	net.Listener
	overall, perAddr int
	m                *connMetrics

	mu     sync.Mutex
	open   int
	byAddr map[netip.Prefix]int
}

// Accept returns the next connection within the caps, closing the ones
// past them.
func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := sourcePrefix(c.RemoteAddr().String())
		l.mu.Lock()
		refused := ""
		switch {
		case l.byAddr[addr] >= l.perAddr:
			refused = "address"
		case l.open >= l.overall:
			refused = "overall"
		default:
			l.open++
			l.byAddr[addr]++
		}
		l.mu.Unlock()
		if refused != "" {
			c.Close()
			l.m.refused.WithLabelValues(refused).Inc()
			continue
		}
		l.m.open.Inc()
		return &capConn{Conn: c, l: l, addr: addr}, nil
	}
}

// release gives back a closed connection's place.
func (l *capListener) release(addr netip.Prefix) {
	l.mu.Lock()
	l.open--
	if l.byAddr[addr]--; l.byAddr[addr] <= 0 {
		delete(l.byAddr, addr)
	}
	l.mu.Unlock()
	l.m.open.Dec()
}

// capConn gives its place back once, on its first Close.
type capConn struct {
	net.Conn
	l    *capListener
	addr netip.Prefix
	once sync.Once
}

func (c *capConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.addr) })
	return err
}
