package sim

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"
)

// maxBody bounds a request body; an image is far smaller.
const maxBody = 4 << 20

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
var errTooBig = errors.New("request body too large")

// parseRequest reads the query and the body, urlencoded or multipart.
func parseRequest(w http.ResponseWriter, r *http.Request) (*request, error) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	q := &request{params: make(map[string]string)}
	var err error
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct == "multipart/form-data" {
		err = r.ParseMultipartForm(maxBody)
	} else {
		err = r.ParseForm()
	}
	for name, vs := range r.Form {
		ln := strings.ToLower(name)
		if _, dup := q.params[ln]; !dup && len(vs) > 0 {
			q.params[ln] = vs[0]
		}
	}
	q.json = q.params["json"] == "1" || strings.EqualFold(q.params["json"], "true")
	q.acao = q.params["header_acao"] == "1"
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return q, errTooBig
		}
		return q, err
	}
	if r.MultipartForm != nil {
		for name, fhs := range r.MultipartForm.File {
			if !strings.EqualFold(name, "file") || len(fhs) == 0 {
				continue
			}
			f, err := fhs[0].Open()
			if err != nil {
				return q, err
			}
			q.file, err = io.ReadAll(f)
			f.Close()
			if err != nil {
				return q, err
			}
			q.hasFile = true
			break
		}
	}
	return q, nil
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
