package server

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/startstop"
)

// History defaults: a sample every five seconds, an hour of them.
const (
	HistoryEveryDefault  = 5 * time.Second
	HistoryWindowDefault = time.Hour
)

// sample is one reading of the numbers the dashboard charts.
type sample struct {
	at                  time.Time
	inUse, window, plan int
	depth               map[string]int // tasks waiting, by priority
	solved, failed      int64          // totals since start
	delayP50, delayP99  float64        // seconds
	inflight            map[string]int
	broker              map[string]int // broker queues, when the Backend has them
	paused              bool
	reservoirs          map[string]reservoirTotals
}

// reservoirTotals are a reservoir's draws and waste since it was set.
type reservoirTotals struct{ hits, misses, expired int64 }

// history keeps the last window of samples in a ring, in memory: the
// charts survive a reload of the page, not a restart of the server.
type history struct {
	*startstop.Loop
	every time.Duration
	read  func(context.Context, time.Time) sample

	mu   sync.Mutex
	ring []sample
	next int // where the next sample goes
	n    int // samples held
}

func newHistory(every, window time.Duration, read func(context.Context, time.Time) sample) *history {
	h := &history{every: every, read: read, ring: make([]sample, max(2, int(window/every)))}
	h.Loop = startstop.New(h.run)
	return h
}

// run takes a sample now and then one every h.every until ctx ends.
func (h *history) run(ctx context.Context) {
	startstop.Every(ctx, h.every, func(ctx context.Context) { h.add(h.read(ctx, time.Now())) })
}

func (h *history) add(s sample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ring[h.next] = s
	h.next = (h.next + 1) % len(h.ring)
	h.n = min(h.n+1, len(h.ring))
}

// samples returns the samples held, oldest first.
func (h *history) samples() []sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]sample, 0, h.n)
	for i := range h.n {
		out = append(out, h.ring[(h.next-h.n+i+len(h.ring))%len(h.ring)])
	}
	return out
}

// History is the dashboard's charts as served at /v1/history: one column
// per series, aligned on T (Unix seconds), as a charting library takes
// them. A value is null where it is not known (a rate before the second
// sample, a priority or client before it was seen).
type History struct {
	EverySeconds  float64   `json:"every_seconds"`
	WindowSeconds float64   `json:"window_seconds"`
	T             []float64 `json:"t"`
	ThreadsInUse  []float64 `json:"threads_in_use"`
	ThreadsWindow []float64 `json:"threads_window"`
	ThreadsPlan   []float64 `json:"threads_plan"`
	// Depth is tasks waiting for a thread, by priority ("0", "5", …).
	Depth map[string][]*float64 `json:"depth"`
	// SolvedPerMin and FailedPerMin are over the minute before each
	// sample (or since the first sample, in the first minute).
	SolvedPerMin []*float64 `json:"solved_per_min"`
	FailedPerMin []*float64 `json:"failed_per_min"`
	// DelayP50Ms and DelayP99Ms: how long answers sat ready at the
	// provider before delivery, in milliseconds.
	DelayP50Ms []float64 `json:"delay_p50_ms"`
	DelayP99Ms []float64 `json:"delay_p99_ms"`
	// Inflight is each client's unfinished tasks.
	Inflight map[string][]*float64 `json:"inflight"`
	// Broker is messages ready in each broker queue (a gateway only).
	Broker map[string][]*float64 `json:"broker,omitempty"`
	Paused []bool                `json:"paused"`
	// Reservoirs are each reservoir's draws and waste per minute, by
	// name (serve --reservoirs); none without reservoirs.
	Reservoirs map[string]ReservoirHistory `json:"reservoirs,omitempty"`
}

// ReservoirHistory is one reservoir's columns of History: tasks that took
// a token (hits) and that found none (misses), and tokens aged out unused
// (expired), each per minute as SolvedPerMin is; null before the
// reservoir was set, or where it was set again with other params (its
// counts start again).
type ReservoirHistory struct {
	HitsPerMin    []*float64 `json:"hits_per_min"`
	MissesPerMin  []*float64 `json:"misses_per_min"`
	ExpiredPerMin []*float64 `json:"expired_per_min"`
}

// rateWindow is what the per-minute rates are taken over.
const rateWindow = time.Minute

func (h *history) view() History {
	ss := h.samples()
	out := History{
		EverySeconds: h.every.Seconds(), WindowSeconds: (time.Duration(len(h.ring)) * h.every).Seconds(),
		T: []float64{}, ThreadsInUse: []float64{}, ThreadsWindow: []float64{}, ThreadsPlan: []float64{},
		Depth: map[string][]*float64{}, SolvedPerMin: []*float64{}, FailedPerMin: []*float64{},
		DelayP50Ms: []float64{}, DelayP99Ms: []float64{}, Inflight: map[string][]*float64{}, Paused: []bool{},
	}
	out.Depth = columns(ss, func(s sample) map[string]int { return s.depth })
	out.Inflight = columns(ss, func(s sample) map[string]int { return s.inflight })
	if broker := columns(ss, func(s sample) map[string]int { return s.broker }); len(broker) > 0 {
		out.Broker = broker
	}
	out.Reservoirs = reservoirColumns(ss)
	starts := map[string]int{} // by reservoir: the sample its counts start at
	from := 0                  // the first sample within rateWindow before the current one
	for i, s := range ss {
		out.T = append(out.T, float64(s.at.UnixMilli())/1000)
		out.ThreadsInUse = append(out.ThreadsInUse, float64(s.inUse))
		out.ThreadsWindow = append(out.ThreadsWindow, float64(s.window))
		out.ThreadsPlan = append(out.ThreadsPlan, float64(s.plan))
		out.DelayP50Ms = append(out.DelayP50Ms, math.Round(s.delayP50*1000))
		out.DelayP99Ms = append(out.DelayP99Ms, math.Round(s.delayP99*1000))
		out.Paused = append(out.Paused, s.paused)
		for from < i-1 && s.at.Sub(ss[from+1].at) >= rateWindow {
			from++
		}
		// A rate at s over the samples since a; none at the first sample.
		rate := func(a sample, total func(sample) int64) *float64 {
			if dt := s.at.Sub(a.at); i > 0 && dt > 0 {
				return num(float64(total(s)-total(a)) * rateWindow.Seconds() / dt.Seconds())
			}
			return nil
		}
		out.SolvedPerMin = append(out.SolvedPerMin, rate(ss[from], func(s sample) int64 { return s.solved }))
		out.FailedPerMin = append(out.FailedPerMin, rate(ss[from], func(s sample) int64 { return s.failed }))
		for name, rh := range out.Reservoirs {
			if restarted(ss, i, name) {
				starts[name] = i
			}
			a := ss[max(from, starts[name])]
			count := func(get func(reservoirTotals) int64) *float64 {
				return rate(a, func(s sample) int64 { return get(s.reservoirs[name]) })
			}
			rh.HitsPerMin = append(rh.HitsPerMin, count(func(c reservoirTotals) int64 { return c.hits }))
			rh.MissesPerMin = append(rh.MissesPerMin, count(func(c reservoirTotals) int64 { return c.misses }))
			rh.ExpiredPerMin = append(rh.ExpiredPerMin, count(func(c reservoirTotals) int64 { return c.expired }))
			out.Reservoirs[name] = rh
		}
	}
	return out
}

// restarted reports whether reservoir name's counts start at sample i:
// it is not in sample i, or not in the one before, or a count fell (it
// was set again with other params).
func restarted(ss []sample, i int, name string) bool {
	c, ok := ss[i].reservoirs[name]
	if !ok || i == 0 {
		return !ok
	}
	p, had := ss[i-1].reservoirs[name]
	return !had || c.hits < p.hits || c.misses < p.misses || c.expired < p.expired
}

// reservoirColumns are the reservoirs of any of ss, each with empty
// columns.
func reservoirColumns(ss []sample) map[string]ReservoirHistory {
	out := map[string]ReservoirHistory{}
	for _, s := range ss {
		for name := range s.reservoirs {
			out[name] = ReservoirHistory{HitsPerMin: []*float64{}, MissesPerMin: []*float64{}, ExpiredPerMin: []*float64{}}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// columns makes one column per key seen in any sample. A sample whose map
// has no such key reads 0 there (nothing waiting at that priority); one
// with no map at all (the broker did not answer) reads null.
func columns(ss []sample, get func(sample) map[string]int) map[string][]*float64 {
	keys := map[string]bool{}
	for _, s := range ss {
		for k := range get(s) {
			keys[k] = true
		}
	}
	out := make(map[string][]*float64, len(keys))
	for k := range keys {
		col := make([]*float64, len(ss))
		for i, s := range ss {
			if m := get(s); m != nil {
				col[i] = num(float64(m[k]))
			}
		}
		out[k] = col
	}
	return out
}

func num(v float64) *float64 { v = math.Round(v*100) / 100; return &v }

// readSample reads the numbers the charts show, now.
func (s *Server) readSample(ctx context.Context, now time.Time) sample {
	m := s.backend.Metrics()
	out := sample{
		at: now, inUse: m.ThreadsInUse, window: m.Window, plan: m.Threads,
		depth: map[string]int{}, solved: m.Solved, failed: m.Failed,
		delayP50: m.DeliveryDelayP50, delayP99: m.DeliveryDelayP99,
		inflight: map[string]int{}, paused: m.Paused,
	}
	out.depth[strconv.Itoa(captchaq.PriorityDefault)] = 0 // a chart from the start
	for p, n := range m.DepthByPriority {
		out.depth[strconv.Itoa(p)] = n
	}
	for _, c := range s.cfg.Clients {
		out.inflight[c.Name] = s.clients.byName[c.Name].inflightCount()
	}
	if s.local != nil {
		for _, c := range s.local.queue.Reservoirs() {
			if out.reservoirs == nil {
				out.reservoirs = map[string]reservoirTotals{}
			}
			out.reservoirs[c.Name] = reservoirTotals{hits: c.Hits, misses: c.Misses, expired: c.Expired}
		}
	}
	if qd, ok := s.backend.(QueueDepther); ok {
		ctx, cancel := context.WithTimeout(ctx, depthWait)
		out.broker, _ = qd.QueueDepths(ctx) // a broker that does not answer leaves a gap
		cancel()
	}
	return out
}

// handleHistory serves the charts' data to an admin client.
func (s *Server) handleHistory(w http.ResponseWriter, r *http.Request, cs *clientState) {
	if !cs.Admin {
		apiFail(w, http.StatusForbidden, "Authorization", "the history of the whole queue is for admin clients: use a key with \"admin\": true")
		return
	}
	writeJSON(w, http.StatusOK, s.history.view())
}
