package sim

import (
	"encoding/hex"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// delaySamples bounds the ready-to-fetched samples kept for quantiles: up
// to this many every sample is kept (quantiles are exact), beyond it a
// uniform reservoir.
const delaySamples = 1 << 16

// Stats is a snapshot of the simulator's counters since New or ResetStats.
// GET /sim/stats serves it as JSON with these field names.
type Stats struct {
	// Calls counts HTTP calls to in.php and res.php by kind.
	Calls Calls `json:"calls"`
	// IDsPolled counts ids asked for in polls, one per single poll and one
	// per id of a bulk poll.
	IDsPolled int64 `json:"ids_polled"`
	// MaxPollsPerTask is the most polls one task drew: a provider's poll
	// budget (120 at CapMonster Cloud and CapSolver) bounds it.
	MaxPollsPerTask int64 `json:"max_polls_per_task"`
	// NoSlot counts submits answered with Config.NoSlotAnswer.
	NoSlot int64 `json:"no_slot"`
	// Accepted counts submits that got an id.
	Accepted int64 `json:"accepted"`
	// Solved and Unsolvable count tasks whose solve time came.
	Solved     int64 `json:"solved"`
	Unsolvable int64 `json:"unsolvable"`
	// Fetched counts tasks whose final answer (token or
	// ERROR_CAPTCHA_UNSOLVABLE) a poll delivered, once per task.
	Fetched int64 `json:"fetched"`
	// Faults counts injected transport failures.
	Faults FaultCounts `json:"faults"`
	// Bans counts poll bans imposed.
	Bans int64 `json:"bans"`
	// TooManyRequests counts getTaskResult calls refused for coming
	// within Config.TaskResultGap of the task's last one.
	TooManyRequests int64 `json:"too_many_requests"`
	// Refused counts submits refused for their type: a method not in
	// Config.Methods or withdrawn (Withdraw).
	Refused int64 `json:"refused"`
	// Spent is what the solves cost (Config.PricePer1000).
	Spent float64 `json:"spent"`
	// ReportsBad and ReportsGood count recorded reports.
	ReportsBad  int64 `json:"reports_bad"`
	ReportsGood int64 `json:"reports_good"`
	// Threads is the plan's thread count; ThreadsInUse the tasks accepted
	// and not solved now; PeakThreadsInUse the most at once.
	Threads          int `json:"threads"`
	ThreadsInUse     int `json:"threads_in_use"`
	PeakThreadsInUse int `json:"peak_threads_in_use"`
	// WindowSeconds is the time from the first to the last accepted submit;
	// BusyThreadSeconds the thread-seconds in use within that window; and
	// Utilization = BusyThreadSeconds / (Threads × WindowSeconds), 0 while
	// the window is empty.
	WindowSeconds     float64 `json:"window_seconds"`
	BusyThreadSeconds float64 `json:"busy_thread_seconds"`
	Utilization       float64 `json:"utilization"`
	// ReadyToFetched is the time from a task's solve to the first delivery
	// of its final answer, by a poll or by the start of its pingback call.
	ReadyToFetched Quantiles `json:"ready_to_fetched"`
	// SolveSecondsDrawn is the sum of the solve times drawn for accepted
	// submits, and SolveSecondsLongest the longest of them: with Threads
	// they give the floor of a batch's makespan, max(drawn ÷ threads,
	// longest), which no client can beat.
	SolveSecondsDrawn   float64 `json:"solve_seconds_drawn"`
	SolveSecondsLongest float64 `json:"solve_seconds_longest"`
	// Duplicates counts accepted submits whose fingerprint (see
	// Fingerprint) equals that of a submit accepted less than
	// Config.ResultTTL before.
	Duplicates int64 `json:"duplicates"`
	// PingbacksSent counts pingback calls answered with a 2xx status;
	// PingbacksFailed those that failed or got another status.
	PingbacksSent   int64 `json:"pingbacks_sent"`
	PingbacksFailed int64 `json:"pingbacks_failed"`
	// TasksKept is how many tasks the server holds in memory now.
	TasksKept int `json:"tasks_kept"`
}

// Calls counts HTTP calls by kind.
type Calls struct {
	Submit      int64 `json:"submit"`
	PollSingle  int64 `json:"poll_single"`
	PollBulk    int64 `json:"poll_bulk"`
	Balance     int64 `json:"balance"`
	Report      int64 `json:"report"`
	ThreadsInfo int64 `json:"threadsinfo"`
	Other       int64 `json:"other"`
	// CreateTask counts the calls above made in the createTask protocol
	// (createTask is a submit, getTaskResult a single poll, ...).
	CreateTask int64 `json:"createtask"`
}

// FaultCounts counts injected faults by type; Total is their sum.
type FaultCounts struct {
	Total   int64 `json:"total"`
	HTTP5xx int64 `json:"http_5xx"`
	Slow    int64 `json:"slow"`
	Dropped int64 `json:"dropped"`
}

// Quantiles summarizes durations in seconds (nearest-rank quantiles).
type Quantiles struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean_seconds"`
	P50   float64 `json:"p50_seconds"`
	P90   float64 `json:"p90_seconds"`
	P99   float64 `json:"p99_seconds"`
	Max   float64 `json:"max_seconds"`
}

// statsState is the live counters behind Stats.
type statsState struct {
	calls                            Calls
	idsPolled, noSlot, accepted      int64
	maxPollsPerTask                  int64
	solved, unsolvable, fetched      int64
	spent                            float64
	faults5xx, faultsSlow            int64
	faultsDropped, bans              int64
	tooManyRequests, refused         int64
	reportsBad, reportsGood          int64
	duplicates                       int64
	pingbacksSent, pingbacksFailed   int64
	peak                             int
	busyAt                           time.Time // when busyNanos was last brought up to date
	busyNanos                        int64     // ∫ threads in use dt since the stats began
	firstAccept, lastAccept          time.Time
	busyAtFirstAccept, busyAtLastAcc int64

	drawn, longest time.Duration // solve times drawn for accepted submits

	delays     []time.Duration
	delayCount int64
	delaySum   time.Duration
	delayMax   time.Duration
	sampler    *rand.Rand // reservoir draws, apart from the main stream

	submissions submissionBook
}

func (st *statsState) reset(seed uint64, window time.Duration) {
	*st = statsState{
		sampler:     rand.New(rand.NewPCG(seed, 0x5157_0002)),
		submissions: newSubmissionBook(window),
	}
}

func (st *statsState) recordDelay(d time.Duration) {
	d = max(d, 0)
	st.delayCount++
	st.delaySum += d
	st.delayMax = max(st.delayMax, d)
	if len(st.delays) < delaySamples {
		st.delays = append(st.delays, d)
		return
	}
	if i := st.sampler.Int64N(st.delayCount); i < delaySamples {
		st.delays[i] = d
	}
}

func (st *statsState) countSubmission(fp [16]byte, at time.Time) {
	st.accepted++
	if st.submissions.add(fp, at) {
		st.duplicates++
	}
}

// advanceBusy brings the busy integral up to t, inUse threads in use
// since it was last brought.
func (st *statsState) advanceBusy(t time.Time, inUse int) {
	if t.After(st.busyAt) {
		if inUse > 0 {
			st.busyNanos += int64(inUse) * int64(t.Sub(st.busyAt))
		}
		st.busyAt = t
	}
}

// countFault counts a fault drawn for a call.
func (st *statsState) countFault(f fault) {
	switch f {
	case faultDrop:
		st.faultsDropped++
	case fault5xx:
		st.faults5xx++
	case faultSlow:
		st.faultsSlow++
	}
}

// Stats returns the counters since New or the last ResetStats.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runDueLocked(s.cfg.Now())
	st := &s.st
	out := Stats{
		Calls:           st.calls,
		IDsPolled:       st.idsPolled,
		MaxPollsPerTask: st.maxPollsPerTask,
		NoSlot:          st.noSlot,
		Accepted:        st.accepted,
		Solved:          st.solved,
		Unsolvable:      st.unsolvable,
		Fetched:         st.fetched,
		Faults: FaultCounts{
			Total:   st.faults5xx + st.faultsSlow + st.faultsDropped,
			HTTP5xx: st.faults5xx, Slow: st.faultsSlow, Dropped: st.faultsDropped,
		},
		Bans:             st.bans,
		TooManyRequests:  st.tooManyRequests,
		Refused:          st.refused,
		Spent:            st.spent,
		ReportsBad:       st.reportsBad,
		ReportsGood:      st.reportsGood,
		Threads:          s.cfg.Threads,
		ThreadsInUse:     s.table.inUse,
		PeakThreadsInUse: st.peak,
		Duplicates:       st.duplicates,
		PingbacksSent:    st.pingbacksSent,
		PingbacksFailed:  st.pingbacksFailed,
		TasksKept:        len(s.table.tasks),

		SolveSecondsDrawn:   st.drawn.Seconds(),
		SolveSecondsLongest: st.longest.Seconds(),
	}
	if !st.firstAccept.IsZero() {
		window := st.lastAccept.Sub(st.firstAccept)
		busy := time.Duration(st.busyAtLastAcc - st.busyAtFirstAccept)
		out.WindowSeconds = window.Seconds()
		out.BusyThreadSeconds = busy.Seconds()
		if window > 0 {
			out.Utilization = float64(busy) / (float64(s.cfg.Threads) * float64(window))
		}
	}
	out.ReadyToFetched = quantiles(st.delays, st.delayCount, st.delayMax)
	if st.delayCount > 0 {
		out.ReadyToFetched.Mean = (st.delaySum / time.Duration(st.delayCount)).Seconds()
	}
	return out
}

func quantiles(samples []time.Duration, count int64, maxD time.Duration) Quantiles {
	q := Quantiles{Count: count, Max: maxD.Seconds()}
	if len(samples) == 0 {
		return q
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	at := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(sorted)))) - 1
		return sorted[max(i, 0)].Seconds()
	}
	q.P50, q.P90, q.P99 = at(0.50), at(0.90), at(0.99)
	return q
}

// ResetStats zeroes every counter and starts a new utilization window.
// Tasks, threads in use and bans are kept.
func (s *Server) ResetStats() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Now()
	s.runDueLocked(now)
	s.st.reset(s.cfg.Seed, s.cfg.ResultTTL)
	s.st.busyAt = now
	s.st.peak = s.table.inUse
}

// SubmissionsOf returns how many accepted submits had the fingerprint fp
// (from Fingerprint) since New or ResetStats, counting from the first one
// after Config.ResultTTL without any.
func (s *Server) SubmissionsOf(fp string) int {
	b, err := hex.DecodeString(fp)
	if err != nil || len(b) != 16 {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.submissions.count([16]byte(b), s.cfg.Now())
}
