package bench

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// tcpProxy forwards connections to a target. Cut, it forwards nothing
// and closes nothing, as a network partition: both sockets stay open,
// bytes vanish, and only heartbeats can tell. Not cut, a close on one
// side closes the other, as the network would carry it.
type tcpProxy struct {
	ln     net.Listener
	target string
	cut    atomic.Bool

	mu    sync.Mutex
	ports []int // local ports of the connections to the target
	conns []net.Conn
}

func newTCPProxy(target string) (*tcpProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &tcpProxy{ln: ln, target: target}
	go p.accept()
	return p, nil
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) setCut(cut bool) { p.cut.Store(cut) }

// upstreamPorts are the local ports of the proxy's connections to the
// target: the peer ports the target sees.
func (p *tcpProxy) upstreamPorts() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int(nil), p.ports...)
}

func (p *tcpProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.ports = append(p.ports, up.LocalAddr().(*net.TCPAddr).Port)
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

// pipe copies src to dst while not cut; when src ends, it closes dst
// unless cut.
func (p *tcpProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			if !p.cut.Load() {
				dst.Close()
			}
			return
		}
		if !p.cut.Load() {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
	}
}

func (p *tcpProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// apiProxy is a worker's way to the provider: it notes when the provider
// last accepted a submit of that worker (in.php's "OK|ID", or status 1
// in JSON), and, cut,
// holds every request unanswered until the cut is over, as a partition
// holds a live TCP connection's bytes.
type apiProxy struct {
	srv *httptest.Server
	cut atomic.Bool

	mu       sync.Mutex
	uncut    chan struct{} // closed while not cut
	accepted time.Time     // the last accepted submit
}

func newAPIProxy(target string) (*apiProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	p := &apiProxy{uncut: make(chan struct{})}
	close(p.uncut)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		if !strings.HasSuffix(resp.Request.URL.Path, "/in.php") {
			return nil
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		if err != nil {
			return err
		}
		var js struct {
			Status int `json:"status"`
		}
		if bytes.HasPrefix(body, []byte("OK|")) || json.Unmarshal(body, &js) == nil && js.Status == 1 {
			p.mu.Lock()
			p.accepted = time.Now()
			p.mu.Unlock()
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return nil
	}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		uncut := p.uncut
		p.mu.Unlock()
		select {
		case <-uncut:
		case <-r.Context().Done():
			return
		}
		rp.ServeHTTP(w, r)
	}))
	return p, nil
}

func (p *apiProxy) url() string { return p.srv.URL }

// lastAccepted is when the provider last accepted a submit through p.
func (p *apiProxy) lastAccepted() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

func (p *apiProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cut == !isClosed(p.uncut) {
		return
	}
	if cut {
		p.uncut = make(chan struct{})
	} else {
		close(p.uncut)
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (p *apiProxy) close() {
	p.setCut(false)
	p.srv.CloseClientConnections()
	p.srv.Close()
}
