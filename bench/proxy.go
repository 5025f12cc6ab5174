package bench

import (
	"net"
	"sync"
	"sync/atomic"
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
