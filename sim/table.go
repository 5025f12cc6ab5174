package sim

import (
	"cmp"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/captchaq/captchaq/provider"
)

// taskState is where a task is in its life.
type taskState uint8

const (
	statePending    taskState = iota // holds a thread, not solved yet
	stateSolved                      // has an answer
	stateUnsolvable                  // answered ERROR_CAPTCHA_UNSOLVABLE
)

// task is one accepted submit. Its answer is not stored: it is derived from
// the seed and the id whenever it is needed, which keeps memory small.
type task struct {
	id         uint64
	kind       provider.Kind
	state      taskState
	unsolvable bool // decided at submit, shown at solve time
	acceptedAt time.Time
	doneAt     time.Time
	forgetAt   time.Time
	delivered  bool // the final answer reached the client (poll or pingback)
	fetched    bool // the final answer reached a poll
	reported   bool // a report on it was taken
	pingback   string
	pbJSON     bool // pingback is a createTask callbackUrl
	hint       answerHint
	salt       uint64 // seeds its answer with id: from Config.Seed and what is solved (saltFor)

	pollWindow time.Time // start of the current poll-ban window
	pollCount  int
	polls      int64     // all its polls (Stats.MaxPollsPerTask)
	resultAt   time.Time // last getTaskResult answered for it (Config.TaskResultGap)
}

// taskTable holds the tasks the simulator keeps, the events that solve
// and forget them, and the threads the tasks not solved yet hold. The
// Server's mu guards it, and the stats it counts in.
type taskTable struct {
	cfg    *Config
	st     *statsState
	nextID uint64
	tasks  map[uint64]*task
	events eventHeap
	inUse  int           // threads held: tasks accepted and not solved
	wake   chan struct{} // an event became the earliest: the timer loop looks again
}

func newTaskTable(cfg *Config, st *statsState, firstID uint64) taskTable {
	return taskTable{cfg: cfg, st: st, nextID: firstID, tasks: make(map[uint64]*task), wake: make(chan struct{}, 1)}
}

// take counts a thread taken at now.
func (tt *taskTable) take(now time.Time) {
	st := tt.st
	st.advanceBusy(now, tt.inUse)
	tt.inUse++
	st.peak = max(st.peak, tt.inUse)
	if st.firstAccept.IsZero() {
		st.firstAccept, st.busyAtFirstAccept = now, st.busyNanos
	}
	st.lastAccept, st.busyAtLastAcc = now, st.busyNanos
}

// free counts a thread freed at at.
func (tt *taskTable) free(at time.Time) {
	tt.st.advanceBusy(at, tt.inUse)
	tt.inUse--
}

// restore takes back one task of the state file.
func (tt *taskTable) restore(e journalEntry, now time.Time) {
	t := &task{
		id:         e.ID,
		kind:       e.Kind,
		unsolvable: e.Unsolvable,
		acceptedAt: e.AcceptedAt,
		pingback:   e.Pingback,
		pbJSON:     e.PingbackJSON,
		hint:       answerHint{text: e.Hint.Text, charset: e.Hint.Charset, min: e.Hint.Min, max: e.Hint.Max},
		salt:       cmp.Or(e.Salt, tt.cfg.Seed),
	}
	tt.tasks[t.id] = t
	tt.nextID = max(tt.nextID, t.id+1)
	tt.take(now)
	if fp, err := hex.DecodeString(e.Fingerprint); err == nil && len(fp) == 16 {
		tt.st.submissions.add([16]byte(fp), e.AcceptedAt)
	}
	// An overdue solve is done at the timer's first run, at its due time.
	tt.schedule(event{at: e.DueAt, id: t.id, kind: eventSolve})
}

// lookup finds a task by its id text, or gives the error code.
func (tt *taskTable) lookup(idText string) (*task, string) {
	idText = strings.TrimSpace(idText)
	id, err := strconv.ParseUint(idText, 10, 64)
	if err != nil {
		return nil, "ERROR_WRONG_ID_FORMAT"
	}
	t := tt.tasks[id]
	if t == nil {
		return nil, "ERROR_WRONG_CAPTCHA_ID"
	}
	return t, ""
}

// report takes a report on the task of id text idText, or gives the error
// code: the id unknown or not solved, reported already, or past
// Config.ReportWindow after the answer.
func (tt *taskTable) report(idText string, good bool, now time.Time) string {
	t, code := tt.lookup(idText)
	switch {
	case code != "":
		return code
	case t.state != stateSolved:
		return "ERROR_WRONG_CAPTCHA_ID"
	case t.reported:
		return "ERROR_DUPLICATE_REPORT"
	case tt.cfg.ReportWindow > 0 && now.Sub(t.doneAt) > tt.cfg.ReportWindow:
		return "ERROR_REPORT_NOT_RECORDED"
	}
	t.reported = true
	if good {
		tt.st.reportsGood++
	} else {
		tt.st.reportsBad++
	}
	return ""
}

// pollState is one id's answer in a poll.
type pollState struct {
	code   string // an ERROR_… or CAPCHA_NOT_READY; empty when solved
	answer answer
}

// state is t's answer to a poll; a final answer counts as delivered.
func (tt *taskTable) state(t *task, now time.Time) pollState {
	switch t.state {
	case statePending:
		return pollState{code: answerNotReady}
	case stateUnsolvable:
		tt.delivered(t, now, true)
		return pollState{code: "ERROR_CAPTCHA_UNSOLVABLE"}
	}
	tt.delivered(t, now, true)
	return pollState{answer: answerFor(t, tt.cfg.UserAgent)}
}

// delivered records that a final answer reached the client.
func (tt *taskTable) delivered(t *task, now time.Time, byPoll bool) {
	if !t.delivered {
		t.delivered = true
		tt.st.recordDelay(now.Sub(t.doneAt))
	}
	if byPoll && !t.fetched {
		t.fetched = true
		tt.st.fetched++
		t.forgetAt = now.Add(tt.cfg.FetchedRetention)
		tt.schedule(event{at: t.forgetAt, id: t.id, kind: eventForget})
	}
}
