package createtask

import (
	"errors"
	"strconv"
	"strings"

	"github.com/captchaq/captchaq/provider"
)

// CallbackLimit bounds the body of a callbackUrl POST: getTaskResult's
// answer, which is short.
const CallbackLimit = answerLimit

// inphpNotReady is in.php's answer for a task still being solved.
const inphpNotReady = "CAPCHA_NOT_READY"

// Callback is what a service's POST to a task's callbackUrl says: the
// body of getTaskResult's answer for the task, with its taskId.
type Callback struct {
	// TaskID is the task's id, as text (a number, or CapSolver's UUID).
	TaskID string
	// Ready: the task is solved and Answer holds its solution.
	Ready  bool
	Answer provider.Answer
	// Code is the in.php code of a task that is not solved: the one its
	// errorCode stands for (ERROR_CAPTCHA_UNSOLVABLE, …), or
	// CAPCHA_NOT_READY (in.php's) while it is still processing.
	Code string
}

// ReadCallback reads the body of a POST to a task's callbackUrl, as
// CapMonster Cloud and Anti-Captcha send it: getTaskResult's JSON answer
// ({"errorId":0,"status":"ready","solution":{…}} or {"errorId":12,
// "errorCode":"ERROR_CAPTCHA_UNSOLVABLE",…}) with the task's "taskId".
// Field names are read in any letter case. The error says what is
// missing or malformed; it never quotes more than a short piece of body.
func ReadCallback(body []byte) (Callback, error) {
	if len(body) > CallbackLimit {
		return Callback{}, errors.New("callback: the body is over " + strconv.Itoa(CallbackLimit) + " bytes")
	}
	obj, f := foldObject(body, "callback")
	if f != nil {
		return Callback{}, errors.New("callback: the body must be getTaskResult's JSON object with the taskId, got " + short(body))
	}
	var cb Callback
	_, raw, _ := obj.get("taskId")
	id, ok := jsonText(raw)
	if !ok || !validID(id) {
		return Callback{}, errors.New("callback: taskId is missing or not a task id (a number or a string of printable characters, at most 100)")
	}
	cb.TaskID = id
	if errID, _ := obj.text("errorId"); errID != "" && errID != "0" {
		code, _ := obj.text("errorCode")
		if code == "" {
			code = "ERROR_" + errID
		}
		if code == NotReady {
			cb.Code = inphpNotReady
			return cb, nil
		}
		cb.Code = QueueCode(code)
		return cb, nil
	}
	switch st, _ := obj.text("status"); strings.ToLower(st) {
	case "ready":
		_, sol, _ := obj.get("solution")
		a, ok := answerOf(sol)
		if !ok {
			return Callback{}, errors.New("callback: status ready with no solution captchaq can read: " + short(sol))
		}
		cb.Ready, cb.Answer = true, a
	case "processing", "idle":
		cb.Code = inphpNotReady
	default:
		return Callback{}, errors.New("callback: status " + strconv.Quote(short([]byte(st))) + " is neither ready nor processing")
	}
	return cb, nil
}
