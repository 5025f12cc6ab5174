package createtask

import (
	"strings"

	"github.com/captchaq/captchaq/provider"
)

// Fault is an error answer of the protocol: HTTP 200 with errorId > 0.
type Fault struct {
	ID          int    `json:"errorId"`
	Code        string `json:"errorCode"`
	Description string `json:"errorDescription"`
}

func (f *Fault) Error() string { return f.Code + ": " + f.Description }

// fault is a Fault with the code's errorId.
func fault(code, description string) *Fault {
	return &Fault{ID: errorID(code), Code: code, Description: description}
}

// way says in which direction a row of the code table is read.
type way uint8

const (
	both    way = iota
	toWire      // an in.php code with no createTask code of its own
	toQueue     // a createTask code with no in.php code of its own
)

// codeRow pairs a createTask code with the in.php code of the same
// meaning. id is the errorId 2captcha and Anti-Captcha document for it;
// codes they do not number answer errorId 1.
type codeRow struct {
	wire  string
	id    int
	inphp string
	way   way
}

// codes is the protocol's error table against in.php's. The front reads
// it from in.php to createTask (FrontFault), the provider side from
// createTask to in.php (QueueCode), and provider.Classify then gives the
// queue's class: so a createTask service's ERROR_ZERO_BALANCE is treated
// as in.php's (capacity, with a pause after a streak), its
// ERROR_NO_SUCH_CAPCHA_ID as ERROR_WRONG_CAPTCHA_ID, and so on.
var codes = []codeRow{
	{"ERROR_KEY_DOES_NOT_EXIST", 1, "ERROR_KEY_DOES_NOT_EXIST", both},
	{"ERROR_KEY_DOES_NOT_EXIST", 1, "ERROR_WRONG_USER_KEY", toWire},
	{"ERROR_NO_SLOT_AVAILABLE", 2, "ERROR_NO_SLOT_AVAILABLE", both},
	{"ERROR_NO_SLOT_AVAILABLE", 2, "MAX_USER_TURN", toWire},
	{"ERROR_ZERO_CAPTCHA_FILESIZE", 3, "ERROR_ZERO_CAPTCHA_FILESIZE", both},
	{"ERROR_TOO_BIG_CAPTCHA_FILESIZE", 4, "ERROR_TOO_BIG_CAPTCHA_FILESIZE", both},
	{"ERROR_PAGEURL", 5, "ERROR_PAGEURL", both},
	{"ERROR_ZERO_BALANCE", 10, "ERROR_ZERO_BALANCE", both},
	{"ERROR_IP_NOT_ALLOWED", 11, "ERROR_IP_NOT_ALLOWED", both},
	{"ERROR_CAPTCHA_UNSOLVABLE", 12, "ERROR_CAPTCHA_UNSOLVABLE", both},
	{"ERROR_BAD_DUPLICATES", 13, "ERROR_BAD_DUPLICATES", both},
	{"ERROR_NO_SUCH_METHOD", 14, "ERROR_METHOD_CALL", both},
	{"ERROR_NO_SUCH_METHOD", 14, "ERROR_EMPTY_ACTION", toWire},
	{"ERROR_IMAGE_TYPE_NOT_SUPPORTED", 15, "ERROR_IMAGE_TYPE_NOT_SUPPORTED", both},
	{"ERROR_IMAGE_TYPE_NOT_SUPPORTED", 15, "ERROR_WRONG_FILE_EXTENSION", toWire},
	{"ERROR_IMAGE_TYPE_NOT_SUPPORTED", 15, "ERROR_UPLOAD", toWire},
	{"ERROR_NO_SUCH_CAPCHA_ID", 16, "ERROR_WRONG_CAPTCHA_ID", both},
	{"ERROR_NO_SUCH_CAPCHA_ID", 16, "ERROR_WRONG_ID_FORMAT", toWire},
	{"WRONG_CAPTCHA_ID", 16, "ERROR_WRONG_CAPTCHA_ID", toQueue},    // CapMonster
	{"ERROR_TASKID_INVALID", 1, "ERROR_WRONG_CAPTCHA_ID", toQueue}, // CapSolver
	{"ERROR_EMPTY_COMMENT", 20, "ERROR_BAD_PARAMETERS", toQueue},
	{"ERROR_IP_BLOCKED", 21, "IP_BANNED", both},
	{"ERROR_IP_BLOCKED", 21, "ERROR_IP_BANNED", toWire},
	{"ERROR_IP_BANNED", 1, "IP_BANNED", toQueue}, // CapMonster
	{"ERROR_TASK_ABSENT", 22, "ERROR_BAD_PARAMETERS", toQueue},
	{"ERROR_TASK_NOT_SUPPORTED", 23, provider.CodeUnsupportedType, both},
	{"ERROR_TASK_TYPE_DEPRECATED", 1, provider.CodeUnsupportedType, toQueue}, // Anti-Captcha
	{"ERROR_INCORRECT_SESSION_DATA", 24, "ERROR_BAD_PARAMETERS", toQueue},
	{"ERROR_PROXY_CONNECT_REFUSED", 25, "ERROR_PROXY_CONNECTION_FAILED", both},
	{"ERROR_PROXY_CONNECT_TIMEOUT", 26, "ERROR_PROXY_CONNECTION_FAILED", toQueue},
	{"ERROR_PROXY_READ_TIMEOUT", 27, "ERROR_PROXY_CONNECTION_FAILED", toQueue},
	{"ERROR_PROXY_BANNED", 28, "ERROR_BAD_PROXY", toQueue},
	{"ERROR_PROXY_TRANSPARENT", 29, "ERROR_BAD_PROXY", toQueue},
	{"ERROR_RECAPTCHA_TIMEOUT", 30, "ERROR_CAPTCHA_UNSOLVABLE", toQueue},
	{"ERROR_RECAPTCHA_INVALID_SITEKEY", 31, "ERROR_GOOGLEKEY", both},
	{"ERROR_RECAPTCHA_INVALID_DOMAIN", 32, "ERROR_BAD_TOKEN_OR_PAGEURL", both},
	{"ERROR_RECAPTCHA_OLD_BROWSER", 33, "ERROR_CAPTCHA_UNSOLVABLE", toQueue},
	{"ERROR_TOKEN_EXPIRED", 34, "ERROR_TOKEN_EXPIRED", both},
	{"ERROR_PROXY_HAS_NO_IMAGE_SUPPORT", 35, "ERROR_BAD_PROXY", toQueue},
	{"ERROR_PROXY_INCOMPATIBLE_HTTP_VERSION", 36, "ERROR_BAD_PROXY", toQueue},
	{"ERROR_PROXY_NOT_AUTHORISED", 49, "ERROR_BAD_PROXY", toQueue},
	{"ERROR_INVISIBLE_RECAPTCHA", 51, "ERROR_CAPTCHA_UNSOLVABLE", toQueue},
	{"ERROR_FAILED_LOADING_WIDGET", 52, "ERROR_CAPTCHA_UNSOLVABLE", toQueue},
	{"ERROR_ACCOUNT_SUSPENDED", 55, "ERROR_KEY_DOES_NOT_EXIST", toQueue},
	{"ERROR_KEY_DENIED_ACCESS", 1, "ERROR_KEY_DOES_NOT_EXIST", toQueue}, // CapSolver
	{"ERROR_BAD_PARAMETERS", 110, "ERROR_BAD_PARAMETERS", both},
	{"ERROR_INVALID_TASK_DATA", 1, "ERROR_BAD_PARAMETERS", toQueue}, // CapSolver
	{"ERROR_BAD_PARAMETERS", 110, provider.CodeInvalidTask, toWire},
	{"ERROR_BAD_IMGINSTRUCTIONS", 115, "ERROR_BAD_PARAMETERS", toQueue},
	{"ERROR_BAD_PROXY", 130, "ERROR_BAD_PROXY", both},
	{"ERROR_DOMAIN_NOT_ALLOWED", 1, "ERROR_DOMAIN_NOT_ALLOWED", both},
	{"ERROR_CAPTCHAIMAGE_BLOCKED", 1, "ERROR_CAPTCHAIMAGE_BLOCKED", both},
	{"ERROR_TOO_MUCH_REQUESTS", 1, "ERROR_TOO_MUCH_REQUESTS", both},
	{"ERROR_RATE_LIMIT", 1, "ERROR_TOO_MUCH_REQUESTS", toQueue}, // CapSolver
	{"ERROR_REPORT_NOT_RECORDED", 1, "ERROR_REPORT_NOT_RECORDED", both},
	{"ERROR_DUPLICATE_REPORT", 1, "ERROR_DUPLICATE_REPORT", both},
	{"ERROR_SERVICE_UNAVALIABLE", 1, provider.CodeHTTP5xx, toQueue}, // CapSolver, sic
	{"ERROR_INTERNAL_SERVER_ERROR", 1, "ERROR_INTERNAL_SERVER_ERROR", toWire},
}

// NotReady is CapMonster's errorCode for a task not solved yet, which
// getTaskResult may answer instead of status "processing".
const NotReady = "CAPTCHA_NOT_READY"

// errorID is a createTask code's errorId: the table's, else 1.
func errorID(code string) int {
	for _, r := range codes {
		if r.wire == code {
			return r.id
		}
	}
	return 1
}

// FrontFault is the protocol's answer for an in.php code the queue or the
// front gives (ERROR_WRONG_USER_KEY, ERROR_WRONG_CAPTCHA_ID, …), with
// text as its description. An ERROR_ code the table does not name is
// answered as it is, errorId 1; anything else (the queue's own codes of a
// failed task, such as EXPIRED) as ERROR_CAPTCHA_UNSOLVABLE.
func FrontFault(code, text string) *Fault {
	for _, r := range codes {
		if r.inphp == code && r.way != toQueue {
			return &Fault{ID: r.id, Code: r.wire, Description: describe(text, r.wire)}
		}
	}
	switch {
	case strings.HasPrefix(code, "ERROR: 100"):
		return fault("ERROR_NO_SLOT_AVAILABLE", describe(text, code))
	case strings.HasPrefix(code, "ERROR_"):
		return &Fault{ID: 1, Code: code, Description: describe(text, code)}
	}
	if text == "" {
		text = code
	} else if code != "" {
		text = code + ": " + text
	}
	return fault("ERROR_CAPTCHA_UNSOLVABLE", text)
}

// describe is a fault's description: the text, or the code when there is
// none.
func describe(text, code string) string {
	if strings.TrimSpace(text) != "" {
		return text
	}
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(code, "ERROR_")), "_", " ")
}

// QueueCode is the in.php code of the same meaning as a createTask code,
// the code a result or an error of the queue carries; a code the table
// does not name is kept as it is.
func QueueCode(code string) string {
	for _, r := range codes {
		if r.wire == code && r.way != toWire {
			return r.inphp
		}
	}
	return code
}

// classify is a createTask service's error as the queue's *provider.Error:
// the in.php code of the same meaning with its class; the service's own
// code and description stay in the text.
func classify(op, code, description string) *provider.Error {
	code = strings.TrimSpace(code)
	inphp := QueueCode(code)
	text := strings.TrimSpace(description)
	if inphp != code {
		text = strings.TrimSpace(code + " " + text)
	}
	return provider.Classify(op, inphp, text)
}
