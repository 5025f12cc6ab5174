package sim

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/captchaq/captchaq/internal/apiform"
)

// maxBody bounds a request body; an image is far smaller.
const maxBody = apiform.DefaultMaxBody

// maxImage is the largest image accepted, as providers limit it.
const maxImage = 600 << 10

// request is one in.php/res.php call's parameters, names lower-cased so that
// "userAgent" and "useragent" are the same field, as clients differ.
type request struct {
	params  map[string]string
	file    []byte // the multipart "file" part, if any
	hasFile bool
	json    bool
	acao    bool
}

// get returns a parameter by its lower-case name.
func (q *request) get(name string) string { return q.params[name] }

// errTooBig marks a body over maxBody.
var errTooBig = apiform.ErrTooBig

// parseRequest reads the query and the body (urlencoded, multipart or
// JSON) through the parser the HTTP front shares. A wrong key (keyOK) in
// the query string is found before the body is read: the answer is the
// gate's.
func parseRequest(w http.ResponseWriter, r *http.Request, keyOK func(string) bool) (*request, error) {
	f, err := apiform.Parse(w, r, apiform.Options{MaxBody: maxBody, KeyOK: keyOK})
	q := &request{params: f.Fields(), file: f.File, hasFile: f.HasFile, json: f.JSON, acao: f.ACAO}
	switch {
	case errors.Is(err, apiform.ErrWrongKey):
		return q, nil // gate.check answers it, after the bans
	case errors.Is(err, apiform.ErrTooBig):
		return q, errTooBig
	}
	return q, err
}

// Answers that are not errors.
const (
	answerNotReady = "CAPCHA_NOT_READY" // sic, as the protocol spells it
	answerReported = "OK_REPORT_RECORDED"
	answerIPBanned = "IP_BANNED"
)

// errorTexts are the human texts sent as error_text next to a code.
var errorTexts = map[string]string{
	"ERROR_WRONG_USER_KEY":           "The key is not valid.",
	"ERROR_KEY_DOES_NOT_EXIST":       "The key does not exist.",
	"ERROR_ZERO_BALANCE":             "No free thread or no balance on the account.",
	"ERROR_NO_SLOT_AVAILABLE":        "All threads of the plan are busy.",
	answerIPBanned:                   "Your IP address is banned for too many requests. Try again later.",
	"ERROR_PAGEURL":                  "pageurl is missing or not a full http(s) URL.",
	"ERROR_GOOGLEKEY":                "googlekey is missing or empty.",
	"ERROR_BAD_PARAMETERS":           "A required parameter is missing or wrong.",
	"ERROR_BAD_PROXY":                "The proxy is not in the form [login:password@]host:port.",
	"ERROR_ZERO_CAPTCHA_FILESIZE":    "The image is missing or empty.",
	"ERROR_TOO_BIG_CAPTCHA_FILESIZE": "The image is too big.",
	"ERROR_IMAGE_TYPE_NOT_SUPPORTED": "The image could not be decoded.",
	"ERROR_WRONG_ID_FORMAT":          "The id is missing or not a number.",
	"ERROR_WRONG_CAPTCHA_ID":         "The id is unknown or expired.",
	"ERROR_CAPTCHA_UNSOLVABLE":       "The captcha could not be solved.",
	"ERROR_METHOD_CALL":              "Unknown action.",
	"ERROR_DUPLICATE_REPORT":         "The captcha was reported already.",
	"ERROR_REPORT_NOT_RECORDED":      "The report came more than the report window after the answer.",
}

// replyError sends an error code, with status 0 in JSON mode.
func replyError(w http.ResponseWriter, q *request, code, text string) {
	if text == "" {
		text = errorTexts[code]
	}
	if q.json {
		writeJSON(w, q, jsonAnswer{Status: 0, Request: code, ErrorText: text})
		return
	}
	writePlain(w, q, code)
}

// replyOK sends a success: request in JSON, plain as the text body.
func replyOK(w http.ResponseWriter, q *request, request any, plain string) {
	if q.json {
		writeJSON(w, q, jsonAnswer{Status: 1, Request: request})
		return
	}
	writePlain(w, q, plain)
}

// replyStatus0 sends a non-error answer with status 0 (CAPCHA_NOT_READY).
func replyStatus0(w http.ResponseWriter, q *request, code string) {
	if q.json {
		writeJSON(w, q, jsonAnswer{Status: 0, Request: code})
		return
	}
	writePlain(w, q, code)
}

// jsonAnswer is the json=1 answer, fields in the provider's order.
type jsonAnswer struct {
	Status    int    `json:"status"`
	Request   any    `json:"request"`
	ErrorText string `json:"error_text,omitempty"`
	UserAgent string `json:"useragent,omitempty"`
	Cookies   string `json:"cookies,omitempty"`
}

func writeJSON(w http.ResponseWriter, q *request, v jsonAnswer) {
	body, _ := json.Marshal(v) // strings, numbers and raw JSON only
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if q.acao {
		h.Set("Access-Control-Allow-Origin", "*")
	}
	_, _ = w.Write(body)
}

func writePlain(w http.ResponseWriter, q *request, s string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	if q.acao {
		h.Set("Access-Control-Allow-Origin", "*")
	}
	_, _ = io.WriteString(w, s)
}
