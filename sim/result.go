package sim

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// serveResult answers res.php: get (one id or ids=), getbalance,
// reportbad, reportgood and threadsinfo.
func (s *Server) serveResult(w http.ResponseWriter, r *http.Request) {
	q, perr := s.parseRequest(w, r)
	ip := clientIP(r)
	action := strings.ToLower(q.get("action"))
	_, hasIDs := q.params["ids"]
	bulk := hasIDs && !s.cfg.NoBulk || hasIDs && q.get("id") == ""

	s.mu.Lock()
	s.runDueLocked(s.cfg.Now())
	switch action {
	case "get":
		if bulk {
			s.st.calls.PollBulk++
		} else {
			s.st.calls.PollSingle++
		}
	case "getbalance":
		s.st.calls.Balance++
	case "reportbad", "reportgood":
		s.st.calls.Report++
	case "threadsinfo":
		s.st.calls.ThreadsInfo++
	default:
		s.st.calls.Other++
	}
	f := s.drawFaultLocked()
	s.mu.Unlock()
	if f != faultNone && !s.applyFault(w, r, f, http.StatusServiceUnavailable) {
		return
	}
	if perr != nil {
		replyError(w, q, "ERROR_BAD_PARAMETERS", "The request could not be read.")
		return
	}

	s.mu.Lock()
	defer s.mu.Unlock() // answers are small: writing them under the lock is cheap
	now := s.cfg.Now()
	s.runDueLocked(now)
	if gate := s.gateLocked(q, ip, now); gate != "" {
		replyError(w, q, gate, "")
		return
	}
	switch action {
	case "get":
		if bulk {
			s.pollBulkLocked(w, q, ip, now)
		} else {
			s.pollOneLocked(w, q, ip, now)
		}
	case "getbalance":
		v := strconv.FormatFloat(s.balanceLocked(), 'f', -1, 64)
		replyOK(w, q, v, v)
	case "reportbad", "reportgood":
		if code := s.reportLocked(q.get("id"), action == "reportgood", now); code != "" {
			replyError(w, q, code, "")
			return
		}
		replyOK(w, q, answerReported, answerReported)
	case "threadsinfo":
		info := ThreadsInfo{Threads: s.cfg.Threads, WorkingThreads: s.inUse, FreeThreads: s.cfg.Threads - s.inUse}
		b, _ := json.Marshal(info)
		replyOK(w, q, info, string(b))
	case "":
		replyError(w, q, "ERROR_BAD_PARAMETERS", "action is missing.")
	default:
		replyError(w, q, "ERROR_BAD_PARAMETERS", "action "+strconv.Quote(action)+" is not supported.")
	}
}

// ThreadsInfo is threadsinfo's answer: in JSON mode the "request" object,
// in plain mode the same object as JSON text.
type ThreadsInfo struct {
	Threads        int `json:"threads"`
	WorkingThreads int `json:"working_threads"`
	FreeThreads    int `json:"free_threads"`
}

// reportLocked takes a report on the task of id text idText, or gives
// the error code: the id unknown or not solved, reported already, or past
// Config.ReportWindow after the answer.
func (s *Server) reportLocked(idText string, good bool, now time.Time) string {
	t, code := s.lookupLocked(idText)
	switch {
	case code != "":
		return code
	case t.state != stateSolved:
		return "ERROR_WRONG_CAPTCHA_ID"
	case t.reported:
		return "ERROR_DUPLICATE_REPORT"
	case s.cfg.ReportWindow > 0 && now.Sub(t.doneAt) > s.cfg.ReportWindow:
		return "ERROR_REPORT_NOT_RECORDED"
	}
	t.reported = true
	if good {
		s.st.reportsGood++
	} else {
		s.st.reportsBad++
	}
	return ""
}

// lookupLocked finds a task by its id text, or gives the error code.
func (s *Server) lookupLocked(idText string) (*task, string) {
	idText = strings.TrimSpace(idText)
	id, err := strconv.ParseUint(idText, 10, 64)
	if err != nil {
		return nil, "ERROR_WRONG_ID_FORMAT"
	}
	t := s.tasks[id]
	if t == nil {
		return nil, "ERROR_WRONG_CAPTCHA_ID"
	}
	return t, ""
}

// pollState is one id's answer in a poll.
type pollState struct {
	code   string // an ERROR_… or CAPCHA_NOT_READY; empty when solved
	answer answer
}

// countPollLocked counts a poll of t against the poll-ban limit and
// reports whether it went over, which bans ip.
func (s *Server) countPollLocked(t *task, ip string, now time.Time) bool {
	t.polls++
	s.st.maxPollsPerTask = max(s.st.maxPollsPerTask, t.polls)
	pb := s.cfg.PollBan
	if pb.Disabled {
		return false
	}
	if t.pollCount == 0 || now.Sub(t.pollWindow) >= pb.Window {
		t.pollWindow, t.pollCount = now, 0
	}
	t.pollCount++
	if t.pollCount <= pb.Max {
		return false
	}
	s.bans[ip] = now.Add(pb.Duration)
	s.st.bans++
	t.pollCount = 0
	return true
}

// stateLocked is t's answer to a poll; a final answer counts as delivered.
func (s *Server) stateLocked(t *task, now time.Time) pollState {
	switch t.state {
	case statePending:
		return pollState{code: answerNotReady}
	case stateUnsolvable:
		s.deliveredLocked(t, now, true)
		return pollState{code: "ERROR_CAPTCHA_UNSOLVABLE"}
	}
	s.deliveredLocked(t, now, true)
	return pollState{answer: s.answerFor(t)}
}

// deliveredLocked records that a final answer reached the client.
func (s *Server) deliveredLocked(t *task, now time.Time, byPoll bool) {
	if !t.delivered {
		t.delivered = true
		s.st.recordDelay(now.Sub(t.doneAt))
	}
	if byPoll && !t.fetched {
		t.fetched = true
		s.st.fetched++
		t.forgetAt = now.Add(s.cfg.FetchedRetention)
		s.scheduleLocked(event{at: t.forgetAt, id: t.id, kind: eventForget})
	}
}

func (s *Server) pollOneLocked(w http.ResponseWriter, q *request, ip string, now time.Time) {
	s.st.idsPolled++
	var st pollState
	t, code := s.lookupLocked(q.get("id"))
	switch {
	case code != "":
		st.code = code
	case s.countPollLocked(t, ip, now):
		st.code = answerIPBanned
	default:
		st = s.stateLocked(t, now)
	}
	switch {
	case st.code == answerNotReady:
		replyStatus0(w, q, st.code)
	case st.code != "":
		replyError(w, q, st.code, "")
	case st.answer.object:
		replyOK(w, q, json.RawMessage(st.answer.raw), "OK|"+st.answer.raw)
	case q.json:
		// what binds the token goes beside it; plain text has no room
		writeJSON(w, q, jsonAnswer{Status: 1, Request: st.answer.raw, UserAgent: st.answer.userAgent, Cookies: st.answer.cookies})
	default:
		replyOK(w, q, st.answer.raw, "OK|"+st.answer.raw)
	}
}

func (s *Server) pollBulkLocked(w http.ResponseWriter, q *request, ip string, now time.Time) {
	if s.cfg.NoBulk {
		replyError(w, q, "ERROR_WRONG_ID_FORMAT", "")
		return
	}
	var ids []string
	for _, id := range strings.Split(q.get("ids"), ",") {
		if id = strings.TrimSpace(id); id != "" {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		replyError(w, q, "ERROR_WRONG_ID_FORMAT", "")
		return
	}
	if len(ids) > s.cfg.BulkMaxIDs {
		replyError(w, q, "ERROR_BAD_PARAMETERS", "ids carries "+strconv.Itoa(len(ids))+" ids; at most "+strconv.Itoa(s.cfg.BulkMaxIDs)+" are allowed.")
		return
	}
	// Count every id first, so that a call that ends in a ban delivers
	// nothing.
	s.st.idsPolled += int64(len(ids))
	tasks := make([]*task, len(ids))
	parts := make([]string, len(ids))
	banned := false
	for i, id := range ids {
		tasks[i], parts[i] = s.lookupLocked(id)
		if tasks[i] != nil && s.countPollLocked(tasks[i], ip, now) {
			banned = true
			break // one ban per call
		}
	}
	if banned {
		replyError(w, q, answerIPBanned, "")
		return
	}
	for i, t := range tasks {
		if t == nil {
			continue
		}
		st := s.stateLocked(t, now)
		parts[i] = st.code
		if st.code == "" {
			parts[i] = st.answer.raw
		}
	}
	joined := strings.Join(parts, "|")
	replyOK(w, q, joined, joined)
}
