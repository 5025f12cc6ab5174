package sim

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/captchaq/captchaq/provider/createtask"
)

// createTaskMethods are the createTask protocol's methods the simulator
// answers, at the root path beside in.php and res.php.
var createTaskMethods = map[string]bool{
	"/createTask": true, "/getTaskResult": true, "/getBalance": true,
	"/reportIncorrect": true, "/reportCorrect": true,
	"/reportIncorrectImageCaptcha": true, "/reportIncorrectRecaptcha": true, "/reportIncorrectHcaptcha": true,
	"/reportIncorrectTokenCaptcha": true, "/reportCorrectRecaptcha": true,
}

// serveCreateTask answers one method of the createTask protocol. A call
// is translated into the in.php request it stands for and goes through
// the same checks (bans, key, validation, balance, threads), counted in
// Stats under the same kinds, and in Calls.CreateTask.
func (s *Server) serveCreateTask(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Access-Control-Allow-Origin", "*")
	if r.Method == http.MethodOptions {
		h := w.Header()
		h.Set("Access-Control-Allow-Methods", "POST, OPTIONS")
		h.Set("Access-Control-Allow-Headers", "Content-Type")
		w.WriteHeader(http.StatusNoContent)
		return
	}
	method := r.URL.Path
	q, perr := parseRequest(w, r, s.gate.keyOK)
	count := func(c *Calls) {
		c.CreateTask++
		switch {
		case method == "/createTask":
			c.Submit++
		case method == "/getTaskResult":
			c.PollSingle++
		case method == "/getBalance":
			c.Balance++
		default:
			c.Report++
		}
	}
	status := http.StatusServiceUnavailable
	if method == "/createTask" {
		status = http.StatusBadGateway
	}
	if !s.callStart(w, r, count, status) {
		return
	}
	// The in.php request the call stands for: clientKey is its key.
	in := &request{params: map[string]string{"key": q.get("clientkey")}}
	ip := clientIP(r)
	switch {
	case r.Method != http.MethodPost:
		writeFault(w, createtask.FrontFault("ERROR_NO_SUCH_METHOD", "the createTask protocol's methods take POST with a JSON body"))
	case perr == errTooBig:
		writeFault(w, createtask.FrontFault("ERROR_TOO_BIG_CAPTCHA_FILESIZE", errorTexts["ERROR_TOO_BIG_CAPTCHA_FILESIZE"]))
	case perr != nil:
		writeFault(w, createtask.FrontFault("ERROR_BAD_PARAMETERS", "The request could not be read: "+perr.Error()))
	case method == "/createTask":
		s.ctCreate(w, q, in, ip)
	case method == "/getTaskResult":
		s.ctResult(w, q, in, ip)
	case method == "/getBalance":
		s.mu.Lock()
		defer s.mu.Unlock()
		if gate := s.gate.check(in, ip, s.cfg.Now()); gate != "" {
			writeFault(w, createtask.FrontFault(gate, errorTexts[gate]))
			return
		}
		writeCT(w, map[string]any{"errorId": 0, "balance": s.gate.balance()})
	default:
		s.ctReport(w, q, in, ip, strings.HasPrefix(method, "/reportCorrect"))
	}
}

// ctCreate answers createTask: the task object becomes in.php's method and
// params, validated as in.php validates them.
func (s *Server) ctCreate(w http.ResponseWriter, q, in *request, ip string) {
	var spec taskSpec
	var code, text string
	t, f := createtask.ParseTask([]byte(q.get("task")))
	if f == nil {
		in.params["method"] = t.Method
		for k, v := range t.Params {
			in.params[strings.ToLower(k)] = v
		}
		if cb := q.get("callbackurl"); cb != "" {
			in.params["pingback"] = cb
		}
		spec, code, text = s.gate.parseSubmit(in)
		spec.pingbackJSON = spec.pingback != ""
	} else {
		// The gates still come first: a bad key is told before a bad task.
		code, text = "ERROR_BAD_PARAMETERS", f.Description
	}
	id, code, text := s.admit(in, ip, spec, code, text)
	switch {
	case code == "" && f == nil:
		writeCT(w, map[string]any{"errorId": 0, "taskId": id})
	case f != nil && code == "ERROR_BAD_PARAMETERS" && text == f.Description:
		writeFault(w, f)
	default:
		if text == "" {
			text = errorTexts[code]
		}
		if code == RefusalCaptchaAI.Code && strings.HasSuffix(text, notSupported) {
			code = "UNSUPPORTED_TYPE"
		}
		writeFault(w, createtask.FrontFault(code, text))
	}
}

// ctResult answers getTaskResult, counted against the poll ban as a res.php
// poll of one id.
func (s *Server) ctResult(w http.ResponseWriter, q, in *request, ip string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Now()
	s.runDueLocked(now)
	if gate := s.gate.check(in, ip, now); gate != "" {
		writeFault(w, createtask.FrontFault(gate, errorTexts[gate]))
		return
	}
	t, code := s.table.lookup(q.get("taskid"))
	if gap := s.cfg.TaskResultGap; t != nil && gap > 0 {
		if !t.resultAt.IsZero() && now.Sub(t.resultAt) < gap {
			s.st.tooManyRequests++
			writeFault(w, createtask.FrontFault("ERROR_TOO_MUCH_REQUESTS",
				"getTaskResult for task "+strconv.FormatUint(t.id, 10)+" came "+now.Sub(t.resultAt).Round(time.Millisecond).String()+
					" after the last one; ask at most once every "+gap.String()))
			return
		}
		t.resultAt = now
	}
	st := s.pollLocked(t, code, ip, now)
	switch {
	case st.code == answerNotReady:
		writeCT(w, map[string]any{"errorId": 0, "status": "processing"})
	case st.code != "":
		writeFault(w, createtask.FrontFault(st.code, errorTexts[st.code]))
	default:
		writeCT(w, readyAnswer(t, st.answer, s.cfg.PricePer1000))
	}
}

// readyAnswer is getTaskResult's answer for a solved task (and the body of
// its callbackUrl POST), at price per 1000 solves.
func readyAnswer(t *task, a answer, price float64) map[string]any {
	raw := a.bindings()
	if a.object {
		raw = json.RawMessage(a.raw)
	}
	return map[string]any{
		"errorId":    0,
		"status":     "ready",
		"solution":   createtask.Solution(t.kind, a.raw, raw, nil),
		"cost":       strconv.FormatFloat(price/1000, 'f', 5, 64),
		"createTime": t.acceptedAt.Unix(),
		"endTime":    t.doneAt.Unix(),
		"solveCount": 1,
	}
}

// ctReport answers the report methods as res.php's reportbad and
// reportgood.
func (s *Server) ctReport(w http.ResponseWriter, q, in *request, ip string, good bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gate := s.gate.check(in, ip, s.cfg.Now()); gate != "" {
		writeFault(w, createtask.FrontFault(gate, errorTexts[gate]))
		return
	}
	if code := s.table.report(q.get("taskid"), good, s.cfg.Now()); code != "" {
		writeFault(w, createtask.FrontFault(code, errorTexts[code]))
		return
	}
	writeCT(w, map[string]any{"errorId": 0, "status": "success"})
}

// ctPingback is the JSON body of a createTask task's callbackUrl POST:
// getTaskResult's answer with the task's id; userAgent and price are
// Config's.
func ctPingback(t *task, userAgent string, price float64) []byte {
	var m map[string]any
	if t.state == stateSolved {
		m = readyAnswer(t, answerFor(t, userAgent), price)
	} else {
		f := createtask.FrontFault("ERROR_CAPTCHA_UNSOLVABLE", errorTexts["ERROR_CAPTCHA_UNSOLVABLE"])
		m = map[string]any{"errorId": f.ID, "errorCode": f.Code, "errorDescription": f.Description}
	}
	m["taskId"] = t.id
	b, _ := json.Marshal(m)
	return b
}

func writeFault(w http.ResponseWriter, f *createtask.Fault) { writeCT(w, f) }

func writeCT(w http.ResponseWriter, v any) {
	body, _ := json.Marshal(v) // numbers, strings and maps of them
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}
