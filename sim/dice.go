package sim

import (
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/captchaq/captchaq/provider"
)

// dice is the simulator's random stream: a call's fault, a task's solve
// time and whether it is unsolvable are drawn from it in the order calls
// come, so that one seed gives one run. The Server's mu guards it.
type dice struct {
	rng *rand.Rand
	cfg *Config
}

// fault is a transport failure chosen for one call.
type fault uint8

const (
	faultNone fault = iota
	faultDrop
	fault5xx
	faultSlow
)

// fault picks this call's fault, if any.
func (d *dice) fault() fault {
	f := d.cfg.Faults
	if f.DropRate == 0 && f.HTTP5xxRate == 0 && f.SlowRate == 0 {
		return faultNone
	}
	x := d.rng.Float64()
	switch {
	case x < f.DropRate:
		return faultDrop
	case x < f.DropRate+f.HTTP5xxRate:
		return fault5xx
	case x < f.DropRate+f.HTTP5xxRate+f.SlowRate:
		return faultSlow
	}
	return faultNone
}

// unsolvable draws whether a task is one (Config.UnsolvableRate).
func (d *dice) unsolvable() bool { return d.rng.Float64() < d.cfg.UnsolvableRate }

// latency draws a solve time for kind.
func (d *dice) latency(kind provider.Kind) time.Duration {
	z := d.rng.NormFloat64() // drawn always, so the random stream stays stable
	if d.cfg.Instant {
		return 0
	}
	l := d.cfg.Latency[kind]
	x := float64(l.Median) * math.Exp(l.Spread*z)
	x = max(x, float64(l.Min))
	if l.Max > 0 {
		x = min(x, float64(l.Max))
	}
	return time.Duration(x * d.cfg.LatencyScale)
}

// apply carries out a fault: a slow answer waits slow, or until the
// request or done ends. It reports whether the call must still be
// answered normally.
func (f fault) apply(w http.ResponseWriter, r *http.Request, status int, slow time.Duration, done <-chan struct{}) bool {
	switch f {
	case faultDrop:
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return false
			}
		}
		panic(http.ErrAbortHandler) // net/http closes the connection quietly
	case fault5xx:
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(status)
		text := http.StatusText(status)
		_, _ = w.Write([]byte("<html>\r\n<head><title>" + strconv.Itoa(status) + " " + text + "</title></head>\r\n<body>\r\n<center><h1>" +
			strconv.Itoa(status) + " " + text + "</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"))
		return false
	case faultSlow:
		t := time.NewTimer(slow)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return false
		case <-done:
		}
	}
	return true
}
