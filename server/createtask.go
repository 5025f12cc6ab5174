package server

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/provider/createtask"
)

// createTaskMethods are the createTask protocol's methods the front
// answers at the root path, beside in.php and res.php.
var createTaskMethods = []string{
	"createTask", "getTaskResult", "getBalance",
	"reportIncorrect", "reportCorrect", // 2captcha API v2
	"reportIncorrectImageCaptcha", "reportIncorrectRecaptcha", "reportIncorrectHcaptcha", "reportCorrectRecaptcha", // Anti-Captcha
	"reportIncorrectTokenCaptcha", // CapMonster Cloud
}

// ctPingback marks, in the stored Task.Pingback, a createTask task's
// callbackUrl: it is POSTed getTaskResult's JSON with the taskId.
const ctPingback = "createtask+"

// handleCreateTask answers one method of the createTask protocol. It
// translates at the door: the body is read by the same parser and within
// the same caps as in.php's, clientKey is a client's key, a task object
// becomes the in.php method and params (provider/createtask) and then
// goes the in.php path (newFrontTask, acceptFront: the same validation,
// rate, max_inflight, ids and Backend); results, balance and reports are
// res.php's, answered in this protocol's form. Every answer is HTTP 200
// JSON, errors as {"errorId","errorCode","errorDescription"} with the
// in.php code mapped (createtask.FrontFault).
func (s *frontSide) handleCreateTask(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", "*")
	if r.Method == http.MethodOptions {
		h.Set("Access-Control-Allow-Methods", "POST, OPTIONS")
		h.Set("Access-Control-Allow-Headers", "Content-Type")
		h.Set("Access-Control-Max-Age", "86400")
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if r.Method != http.MethodPost {
		ctFail(w, "ERROR_EMPTY_ACTION", "the createTask protocol's methods take POST with a JSON body")
		return
	}
	form, release, err := s.frontForm(w, r)
	defer release()
	if err != nil {
		code, text := formErrorCode(s.cfg, err)
		ctFail(w, code, text)
		return
	}
	cs := s.clients.client(form.Get("clientKey"))
	if cs == nil {
		ctFail(w, "ERROR_WRONG_USER_KEY", "unknown clientKey: use a key from the server's clients file")
		return
	}
	switch method := strings.TrimPrefix(r.URL.Path, "/"); method {
	case "createTask":
		pt, f := createtask.ParseTask([]byte(form.Get("task")))
		if f != nil {
			writeCT(w, f)
			return
		}
		pingback := ""
		if cb := form.Get("callbackUrl"); cb != "" {
			if reason := provider.CheckCallbackURL(cb); reason != "" {
				ctFail(w, "ERROR_BAD_PARAMETERS", "callbackUrl: "+reason)
				return
			}
			pingback = ctPingback + cb
		}
		t, code, text := s.newFrontTask(r.Context(), cs, pt, 0, pingback)
		release() // the task is decoded and checked; acceptFront may wait
		if code == "" {
			var local string
			if local, code, text = s.acceptFront(r.Context(), cs, t); code == "" {
				writeCT(w, map[string]any{"errorId": 0, "taskId": wireID(local)})
				return
			}
		}
		ctFail(w, code, text)
	case "getTaskResult":
		rec, code := s.frontRecord(r, cs, form.Get("taskId"))
		if code != "" {
			text := ""
			if code != "ERROR_INTERNAL_SERVER_ERROR" {
				text = "taskId: no task of yours has this id"
			}
			ctFail(w, code, text)
			return
		}
		writeCT(w, ctResult(rec))
	case "getBalance":
		v, err := s.bal.balance(r.Context())
		if err != nil {
			ctFail(w, CodeBalanceUnknown, "getBalance: "+scrubURLs(err.Error())+"; try again in a few seconds")
			return
		}
		writeCT(w, map[string]any{"errorId": 0, "balance": v})
	default: // the report methods
		if code, text := s.frontReport(r, cs, form.Get("taskId"), strings.HasPrefix(method, "reportCorrect")); code != "" {
			ctFail(w, code, text)
			return
		}
		writeCT(w, map[string]any{"errorId": 0, "status": "success"})
	}
}

// ctResult is getTaskResult's answer for a record: processing, ready with
// the type's solution, or the failure's code.
func ctResult(rec captchaq.Record) map[string]any {
	token, raw, code, text := answer(rec)
	switch {
	case code == "CAPCHA_NOT_READY":
		return map[string]any{"errorId": 0, "status": "processing"}
	case code != "":
		f := createtask.FrontFault(code, text)
		return map[string]any{"errorId": f.ID, "errorCode": f.Code, "errorDescription": f.Description}
	}
	res := rec.Result
	out := map[string]any{
		"errorId":    0,
		"status":     "ready",
		"solution":   createtask.Solution(res.Kind, token, raw, rec.Task.Params),
		"cost":       strconv.FormatFloat(res.Price, 'f', 5, 64),
		"solveCount": res.Attempts,
	}
	if !res.AcceptedAt.IsZero() {
		out["createTime"] = res.AcceptedAt.Unix()
	}
	if !res.FinishedAt.IsZero() {
		out["endTime"] = res.FinishedAt.Unix()
	}
	return withReservoir(out, *res)
}

// ctCallbackBody is the body of a createTask task's callbackUrl POST:
// getTaskResult's answer for its final record, with its taskId.
func ctCallbackBody(rec captchaq.Record, local string) []byte {
	m := ctResult(rec)
	m["taskId"] = wireID(local)
	b, _ := json.Marshal(m) // strings, numbers and maps of them
	return b
}

// wireID is a client's task id as createTask answers it: a number (the
// ids the front hands out are), else the string.
func wireID(local string) any {
	if _, err := strconv.ParseUint(local, 10, 64); err == nil && len(local) < 20 {
		return json.Number(local)
	}
	return local
}

// ctFail answers an in.php code in the createTask protocol's form.
func ctFail(w http.ResponseWriter, code, text string) {
	writeCT(w, createtask.FrontFault(code, text))
}

func writeCT(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}
