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
	q, perr := parseRequest(w, r, s.gate.keyOK)
	ip := clientIP(r)
	action := strings.ToLower(q.get("action"))
	_, hasIDs := q.params["ids"]
	bulk := hasIDs && !s.cfg.NoBulk || hasIDs && q.get("id") == ""
	count := func(c *Calls) {
		switch action {
		case "get":
			if bulk {
				c.PollBulk++
			} else {
				c.PollSingle++
			}
		case "getbalance":
			c.Balance++
		case "reportbad", "reportgood":
			c.Report++
		case "threadsinfo":
			c.ThreadsInfo++
		default:
			c.Other++
		}
	}
	if !s.callStart(w, r, count, http.StatusServiceUnavailable) {
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
	if gate := s.gate.check(q, ip, now); gate != "" {
		replyError(w, q, gate, "")
		return
	}
	switch action {
	case "get":
		if bulk {
			s.pollBulkLocked(w, q, ip, now)
		} else {
			t, code := s.table.lookup(q.get("id"))
			replyPoll(w, q, s.pollLocked(t, code, ip, now))
		}
	case "getbalance":
		v := strconv.FormatFloat(s.gate.balance(), 'f', -1, 64)
		replyOK(w, q, v, v)
	case "reportbad", "reportgood":
		if code := s.table.report(q.get("id"), action == "reportgood", now); code != "" {
			replyError(w, q, code, "")
			return
		}
		replyOK(w, q, answerReported, answerReported)
	case "threadsinfo":
		info := ThreadsInfo{Threads: s.cfg.Threads, WorkingThreads: s.table.inUse, FreeThreads: s.cfg.Threads - s.table.inUse}
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

// pollLocked is a poll of one id's task t (code when the id is bad),
// counted against the poll ban.
func (s *Server) pollLocked(t *task, code, ip string, now time.Time) pollState {
	s.st.idsPolled++
	switch {
	case code != "":
		return pollState{code: code}
	case s.gate.countPoll(t, ip, now):
		return pollState{code: answerIPBanned}
	}
	return s.table.state(t, now)
}

// replyPoll answers a res.php poll of one id.
func replyPoll(w http.ResponseWriter, q *request, st pollState) {
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
		tasks[i], parts[i] = s.table.lookup(id)
		if tasks[i] != nil && s.gate.countPoll(tasks[i], ip, now) {
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
		st := s.table.state(t, now)
		parts[i] = st.code
		if st.code == "" {
			parts[i] = st.answer.raw
		}
	}
	joined := strings.Join(parts, "|")
	replyOK(w, q, joined, joined)
}
