package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/captchaq/captchaq"
)

// ReservoirFileMax bounds a reservoirs file's "size" and "max": tokens
// held in stock and in flight by one reservoir.
const ReservoirFileMax = 1000

// reservoirEntry is one entry of a reservoirs file (serve --reservoirs).
type reservoirEntry struct {
	Name    string                     `json:"name"`
	Method  string                     `json:"method"`
	Params  map[string]json.RawMessage `json:"params"`
	Size    json.RawMessage            `json:"size"`
	Max     int                        `json:"max"`
	MinLife string                     `json:"min_life"`
	Clients []string                   `json:"clients"`
}

// reservoirsExample is a reservoirs file's shape, for errors.
const reservoirsExample = `[{"name":"shop","method":"turnstile","params":{"sitekey":"…","pageurl":"https://…"},"size":"auto","max":50,"min_life":"75s","clients":["qa"]}]`

// LoadReservoirs reads a reservoirs file: a JSON list of entries, each
// the captcha's in.php "method" and "params" (what a submit must match),
// "size" ("auto": from demand, or a number), "max", "min_life" (a Go
// duration) and the "clients" that may draw (names of clients; none: all).
// Unknown fields are refused. Each error names the path, the entry's
// field and the fix; what the queue checks (the method, the params, the
// min life against the token's lifetime) it checks at New or
// SetReservoirs.
func LoadReservoirs(path string, clients []Client) ([]captchaq.ReservoirConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reservoirs file: %w", err)
	}
	var es []reservoirEntry
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&es); err != nil {
		return nil, fmt.Errorf("reservoirs file %s: %v (want a JSON array like %s)", path, err, reservoirsExample)
	}
	if dec.More() {
		return nil, fmt.Errorf("reservoirs file %s: more than one JSON value; put every reservoir in one array like %s", path, reservoirsExample)
	}
	known := map[string]bool{}
	for _, c := range clients {
		known[c.Name] = true
	}
	var errs []error
	out := make([]captchaq.ReservoirConfig, len(es))
	for i, e := range es {
		rc, problems := e.config(known)
		for _, p := range problems {
			errs = append(errs, fmt.Errorf("[%d].%s", i, p))
		}
		out[i] = rc
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("reservoirs file %s: %w", path, err)
	}
	return out, nil
}

// config is e as a ReservoirConfig, with its problems ("field: why; the
// fix"); known are the clients file's names.
func (e reservoirEntry) config(known map[string]bool) (captchaq.ReservoirConfig, []string) {
	var bad []string
	rc := captchaq.ReservoirConfig{Name: e.Name, Max: e.Max, Clients: e.Clients,
		Task: captchaq.Task{Method: e.Method, Params: map[string]string{}}}
	if e.Method == "" {
		bad = append(bad, `method: required: the captcha's in.php method, e.g. "turnstile" or "userrecaptcha"`)
	}
	for k, raw := range e.Params {
		var s string
		switch {
		case json.Unmarshal(raw, &s) == nil:
		case json.Valid(raw) && len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9'):
			s = string(raw) // a number, as in.php's form carries it
		default:
			bad = append(bad, fmt.Sprintf("params.%s: %s is neither a string nor a number; give it as in.php's form does", k, raw))
		}
		rc.Task.Params[k] = s
	}
	switch size := string(e.Size); {
	case size == `"auto"` || size == "":
	default:
		n, err := strconv.Atoi(size)
		if err != nil || n < 1 || n > ReservoirFileMax {
			bad = append(bad, fmt.Sprintf(`size: %s: give "auto" (sized from demand) or a number of tokens from 1 to %d`, size, ReservoirFileMax))
		}
		rc.Size = n
	}
	if e.Max < 0 || e.Max > ReservoirFileMax {
		bad = append(bad, fmt.Sprintf("max: %d: give 1 to %d tokens, or leave it out (default %d)", e.Max, ReservoirFileMax, captchaq.ReservoirMaxDefault))
	}
	if e.MinLife != "" {
		d, err := time.ParseDuration(e.MinLife)
		if err != nil || d <= 0 {
			bad = append(bad, fmt.Sprintf(`min_life: %q: give a positive Go duration such as "75s", or leave it out (a quarter of the token's lifetime)`, e.MinLife))
		}
		rc.MinLife = d
	}
	for _, c := range e.Clients {
		if !known[c] {
			bad = append(bad, fmt.Sprintf("clients: %q is no client of the clients file; name one of its clients, or leave clients out (all may draw)", c))
		}
	}
	return rc, bad
}

// reservoirBook is the local queue's reservoirs as last set, shown on GET
// /v1/reservoirs with their numbers; with Config.Backend it has no queue.
type reservoirBook struct {
	queue *captchaq.Queue
	set   atomic.Pointer[[]captchaq.ReservoirConfig]
}

// SetReservoirs makes rcs the reservoirs of the server's own queue
// (captchaq.Queue.SetReservoirs) and of GET /v1/reservoirs.
func (s *Server) SetReservoirs(rcs []captchaq.ReservoirConfig) error {
	return s.reservoirs.store(rcs)
}

// store sets rcs on the queue, then keeps them for the views.
func (s *reservoirBook) store(rcs []captchaq.ReservoirConfig) error {
	if s.queue == nil {
		return errors.New("reservoirs: the server has no queue of its own (Config.Backend); reservoirs apply to a local queue")
	}
	if err := s.queue.SetReservoirs(rcs); err != nil {
		return err
	}
	s.set.Store(&rcs)
	return nil
}

// ReservoirView is one reservoir on GET /v1/reservoirs: its declaration
// and its live numbers (captchaq.ReservoirCounts; times in milliseconds).
type ReservoirView struct {
	Name    string            `json:"name"`
	Method  string            `json:"method"`
	Params  map[string]string `json:"params"`
	Size    any               `json:"size"` // "auto" or a number
	Max     int               `json:"max"`
	MinLife string            `json:"min_life,omitempty"` // "": a quarter of the lifetime
	Clients []string          `json:"clients,omitempty"`

	Target    int   `json:"target"`
	Stock     int   `json:"stock"`
	InFlight  int   `json:"in_flight"`
	Hits      int64 `json:"hits"`
	Misses    int64 `json:"misses"`
	Solved    int64 `json:"solved"`
	HandedOut int64 `json:"handed_out"`
	Expired   int64 `json:"expired"`
	Failed    int64 `json:"failed"`
	P50ms     int64 `json:"time_to_token_p50_ms"`
	P99ms     int64 `json:"time_to_token_p99_ms"`
}

// views are the reservoirs with their numbers; none without.
func (s *reservoirBook) views() []ReservoirView {
	out := []ReservoirView{}
	rcs := s.set.Load()
	if s.queue == nil || rcs == nil {
		return out
	}
	counts := s.queue.Reservoirs()
	for _, rc := range *rcs {
		v := ReservoirView{Name: rc.Name, Method: rc.Task.Method, Params: rc.Task.Params, Size: "auto",
			Max: cmpOr(rc.Max, max(captchaq.ReservoirMaxDefault, rc.Size)), Clients: rc.Clients}
		if rc.Size > 0 {
			v.Size = rc.Size
		}
		if rc.MinLife > 0 {
			v.MinLife = rc.MinLife.String()
		}
		if i := slices.IndexFunc(counts, func(c captchaq.ReservoirCounts) bool { return c.Name == rc.Name }); i >= 0 {
			c := counts[i]
			v.Target, v.Stock, v.InFlight, v.Hits, v.Misses = c.Target, c.Stock, c.InFlight, c.Hits, c.Misses
			v.Solved, v.HandedOut, v.Expired, v.Failed = c.Solved, c.HandedOut, c.Expired, c.Failed
			v.P50ms, v.P99ms = c.TimeToTokenP50.Milliseconds(), c.TimeToTokenP99.Milliseconds()
		}
		out = append(out, v)
	}
	return out
}

// handle serves the reservoirs and their numbers to an admin.
func (s *reservoirBook) handle(w http.ResponseWriter, r *http.Request, cs *clientState) {
	if !cs.Admin {
		apiFail(w, http.StatusForbidden, "Authorization", "the reservoirs are the operator's: use a key with \"admin\": true")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"reservoirs": s.views()})
}

// reservoirSeries are the Prometheus series of each reservoir, labelled
// with its name alone: the counts of captchaq.ReservoirCounts.
var reservoirSeries = []struct {
	name, help string
	kind       prometheus.ValueType
	value      func(c captchaq.ReservoirCounts) float64
}{
	{"hits_total", "Matching submits that took a token.", prometheus.CounterValue, func(c captchaq.ReservoirCounts) float64 { return float64(c.Hits) }},
	{"misses_total", "Matching submits that found none and were solved as any task.", prometheus.CounterValue, func(c captchaq.ReservoirCounts) float64 { return float64(c.Misses) }},
	{"solved_total", "Refills solved.", prometheus.CounterValue, func(c captchaq.ReservoirCounts) float64 { return float64(c.Solved) }},
	{"handed_out_total", "Tokens handed out.", prometheus.CounterValue, func(c captchaq.ReservoirCounts) float64 { return float64(c.HandedOut) }},
	{"expired_total", "Tokens dropped unused with less than min_life left (waste).", prometheus.CounterValue, func(c captchaq.ReservoirCounts) float64 { return float64(c.Expired) }},
	{"refills_failed_total", "Refills that failed.", prometheus.CounterValue, func(c captchaq.ReservoirCounts) float64 { return float64(c.Failed) }},
	{"stock", "Tokens that may be handed out.", prometheus.GaugeValue, func(c captchaq.ReservoirCounts) float64 { return float64(c.Stock) }},
	{"in_flight", "Refills queued or solving.", prometheus.GaugeValue, func(c captchaq.ReservoirCounts) float64 { return float64(c.InFlight) }},
	{"target", "Tokens the reservoir holds in stock and in flight.", prometheus.GaugeValue, func(c captchaq.ReservoirCounts) float64 { return float64(c.Target) }},
	{"time_to_token_p50_seconds", "Median time from a matching submit to its token, hits and misses, over the latest 1000.", prometheus.GaugeValue, func(c captchaq.ReservoirCounts) float64 { return c.TimeToTokenP50.Seconds() }},
	{"time_to_token_p99_seconds", "99th percentile of the time from a matching submit to its token, over the latest 1000.", prometheus.GaugeValue, func(c captchaq.ReservoirCounts) float64 { return c.TimeToTokenP99.Seconds() }},
}

// reservoirCollector reads the local queue's reservoirs at scrape time.
type reservoirCollector struct {
	q     *captchaq.Queue
	descs []*prometheus.Desc
}

func newReservoirCollector(q *captchaq.Queue) *reservoirCollector {
	c := &reservoirCollector{q: q}
	for _, s := range reservoirSeries {
		c.descs = append(c.descs, prometheus.NewDesc("captchaq_reservoir_"+s.name, s.help, []string{"reservoir"}, nil))
	}
	return c
}

func (c *reservoirCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *reservoirCollector) Collect(ch chan<- prometheus.Metric) {
	for _, rc := range c.q.Reservoirs() {
		for i, s := range reservoirSeries {
			ch <- prometheus.MustNewConstMetric(c.descs[i], s.kind, s.value(rc), rc.Name)
		}
	}
}
