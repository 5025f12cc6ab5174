package provider

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// The waits the error table suggests.
const (
	NoSlotRetryAfter      = 5 * time.Second  // ERROR_NO_SLOT_AVAILABLE: at least 5 s
	ZeroBalanceRetryAfter = 10 * time.Second // thread plan full; back off a little longer
	RateLimitRetryAfter   = 10 * time.Second // MAX_USER_TURN, ERROR: 100x
	IPBannedRetryAfter    = 5 * time.Minute  // IP_BANNED lifts itself after about 5 minutes
)

// The client's own codes (not sent by the provider).
const (
	CodeHTTP5xx         = "HTTP_5XX"
	CodeNetwork         = "NETWORK"
	CodeBadAnswer       = "BAD_ANSWER"
	CodeInvalidTask     = "INVALID_TASK"
	CodeUnsupportedType = "UNSUPPORTED_TYPE"
)

// codeTooMany100x stands for every "ERROR: 100x" code in ErrTooManyRequests.
const codeTooMany100x = "ERROR: 100X"

// Sentinels for every code of the protocol's error table, for errors.Is.
// Each carries the class and suggested wait that Classify gives its code.
var (
	// Account: stop sending, keep every task.
	ErrWrongUserKey    = &Error{Code: "ERROR_WRONG_USER_KEY", Class: ClassAccount, Text: "the account key is malformed; check CAPTCHAAI_KEY"}
	ErrKeyDoesNotExist = &Error{Code: "ERROR_KEY_DOES_NOT_EXIST", Class: ClassAccount, Text: "the account key does not exist or has no active plan"}
	ErrIPNotAllowed    = &Error{Code: "ERROR_IP_NOT_ALLOWED", Class: ClassAccount, Text: "this IP address is not allowed for the key"}
	ErrIPBanned        = &Error{Code: "IP_BANNED", Class: ClassAccount, RetryAfter: IPBannedRetryAfter, Text: "this IP address is temporarily banned after too many bad requests"}
	ErrIPBannedAlt     = &Error{Code: "ERROR_IP_BANNED", Class: ClassAccount, RetryAfter: IPBannedRetryAfter, Text: "this IP address is temporarily banned after too many bad requests"}

	// Capacity: wait and retry.
	ErrNoSlotAvailable = &Error{Code: "ERROR_NO_SLOT_AVAILABLE", Class: ClassNoSlot, RetryAfter: NoSlotRetryAfter, Text: "every thread of the plan is busy"}
	ErrZeroBalance     = &Error{Code: "ERROR_ZERO_BALANCE", Class: ClassNoSlot, RetryAfter: ZeroBalanceRetryAfter, Text: "no free thread (thread plans) or no funds (pay-per-solve services)"}

	// Rate limits: pause the endpoint.
	ErrMaxUserTurn     = &Error{Code: "MAX_USER_TURN", Class: ClassRateLimit, RetryAfter: RateLimitRetryAfter, Text: "too many requests"}
	ErrTooMuchRequests = &Error{Code: "ERROR_TOO_MUCH_REQUESTS", Class: ClassRateLimit, RetryAfter: RateLimitRetryAfter, Text: "too many requests"}
	// ErrTooManyRequests matches every "ERROR: 100x" code (ERROR: 1001 ... 1005).
	ErrTooManyRequests = &Error{Code: codeTooMany100x, Class: ClassRateLimit, RetryAfter: RateLimitRetryAfter, Text: "too many requests"}

	// This task is wrong: fail it at once.
	ErrPageURL               = &Error{Code: "ERROR_PAGEURL", Class: ClassTask, Text: "pageurl is missing or invalid"}
	ErrGoogleKey             = &Error{Code: "ERROR_GOOGLEKEY", Class: ClassTask, Text: "googlekey (site key) is missing or invalid"}
	ErrBadParameters         = &Error{Code: "ERROR_BAD_PARAMETERS", Class: ClassTask, Text: "required parameters are missing or wrong"}
	ErrBadTokenOrPageURL     = &Error{Code: "ERROR_BAD_TOKEN_OR_PAGEURL", Class: ClassTask, Text: "the site key and page URL do not belong together"}
	ErrCaptchaImageBlocked   = &Error{Code: "ERROR_CAPTCHAIMAGE_BLOCKED", Class: ClassTask, Text: "this image is blocked by the provider"}
	ErrDomainNotAllowed      = &Error{Code: "ERROR_DOMAIN_NOT_ALLOWED", Class: ClassTask, Text: "the provider does not solve captchas for this domain"}
	ErrWrongFileExtension    = &Error{Code: "ERROR_WRONG_FILE_EXTENSION", Class: ClassTask, Text: "the image file extension is not supported (use jpg, jpeg, gif or png)"}
	ErrImageTypeNotSupported = &Error{Code: "ERROR_IMAGE_TYPE_NOT_SUPPORTED", Class: ClassTask, Text: "the image type is not supported"}
	ErrTooBigCaptchaFilesize = &Error{Code: "ERROR_TOO_BIG_CAPTCHA_FILESIZE", Class: ClassTask, Text: "the image is too big"}
	ErrZeroCaptchaFilesize   = &Error{Code: "ERROR_ZERO_CAPTCHA_FILESIZE", Class: ClassTask, Text: "the image is too small or empty"}
	ErrUpload                = &Error{Code: "ERROR_UPLOAD", Class: ClassTask, Text: "the image upload was not understood (bad base64 or multipart)"}
	ErrWrongIDFormat         = &Error{Code: "ERROR_WRONG_ID_FORMAT", Class: ClassTask, Text: "the captcha id is not a number"}
	ErrWrongCaptchaID        = &Error{Code: "ERROR_WRONG_CAPTCHA_ID", Class: ClassTask, Text: "the provider does not know this captcha id"}
	ErrEmptyAction           = &Error{Code: "ERROR_EMPTY_ACTION", Class: ClassTask, Text: "the request named no action"}
	ErrMethodCall            = &Error{Code: "ERROR_METHOD_CALL", Class: ClassTask, Text: "the method is unknown to the provider"}
	ErrTokenExpired          = &Error{Code: "ERROR_TOKEN_EXPIRED", Class: ClassTask, Text: "the GeeTest challenge expired; fetch a new challenge"}
	ErrBadProxy              = &Error{Code: "ERROR_BAD_PROXY", Class: ClassTask, Text: "the task's proxy is bad"}
	ErrProxyConnectionFailed = &Error{Code: "ERROR_PROXY_CONNECTION_FAILED", Class: ClassTask, Text: "the provider could not connect through the task's proxy"}
	ErrReportNotRecorded     = &Error{Code: "ERROR_REPORT_NOT_RECORDED", Class: ClassTask, Text: "the report was not recorded (too late, or reported already)"}
	ErrDuplicateReport       = &Error{Code: "ERROR_DUPLICATE_REPORT", Class: ClassTask, Text: "this captcha was reported already"}

	// Not solved (not charged): retry a few times.
	ErrCaptchaUnsolvable = &Error{Code: "ERROR_CAPTCHA_UNSOLVABLE", Class: ClassUnsolvable, Text: "the provider could not solve it"}
	ErrBadDuplicates     = &Error{Code: "ERROR_BAD_DUPLICATES", Class: ClassUnsolvable, Text: "not enough matching answers"}

	// The client's own failures.
	ErrHTTP5xx   = &Error{Code: CodeHTTP5xx, Class: ClassTransient, Text: "the provider answered with a server error"}
	ErrNetwork   = &Error{Code: CodeNetwork, Class: ClassTransient, Text: "the provider could not be reached"}
	ErrBadAnswer = &Error{Code: CodeBadAnswer, Class: ClassTransient, Text: "the provider's answer could not be understood"}

	// ErrInvalidTask matches every validation failure (*ValidationError, and
	// an *Error with Code INVALID_TASK).
	ErrInvalidTask = &Error{Code: CodeInvalidTask, Class: ClassTask, Text: "invalid task"}
	// ErrUnsupportedType matches a task of a type the provider does not
	// solve (hCaptcha, FunCaptcha/Arkose, GeeTest v4).
	ErrUnsupportedType = &Error{Code: CodeUnsupportedType, Class: ClassTask, Text: "captcha type not supported by the provider"}
)

// codeTable maps each known code to its sentinel.
var codeTable = func() map[string]*Error {
	m := make(map[string]*Error)
	for _, e := range []*Error{
		ErrWrongUserKey, ErrKeyDoesNotExist, ErrIPNotAllowed, ErrIPBanned, ErrIPBannedAlt,
		ErrNoSlotAvailable, ErrZeroBalance,
		ErrMaxUserTurn, ErrTooMuchRequests,
		ErrPageURL, ErrGoogleKey, ErrBadParameters, ErrBadTokenOrPageURL, ErrCaptchaImageBlocked,
		ErrDomainNotAllowed, ErrWrongFileExtension, ErrImageTypeNotSupported, ErrTooBigCaptchaFilesize,
		ErrZeroCaptchaFilesize, ErrUpload, ErrWrongIDFormat, ErrWrongCaptchaID, ErrEmptyAction,
		ErrMethodCall, ErrTokenExpired, ErrBadProxy, ErrProxyConnectionFailed,
		ErrReportNotRecorded, ErrDuplicateReport,
		ErrCaptchaUnsolvable, ErrBadDuplicates,
		ErrHTTP5xx, ErrNetwork, ErrBadAnswer, ErrInvalidTask, ErrUnsupportedType,
	} {
		m[e.Code] = e
	}
	// createTask services' codes that their in.php endpoints answer too:
	// the class of the in.php code of the same meaning.
	for code, e := range typeRefusalCodes {
		m[code] = e
	}
	return m
}()

// typeRefusalCodes are the createTask codes refusing a type, with the
// in.php sentinel of the same meaning.
var typeRefusalCodes = map[string]*Error{
	"ERROR_TASK_NOT_SUPPORTED":   ErrUnsupportedType, // CapMonster
	"ERROR_TASK_TYPE_DEPRECATED": ErrUnsupportedType, // Anti-Captcha
	"ERROR_INVALID_TASK_DATA":    ErrBadParameters,   // CapSolver, with a text that says so
}

// Classify turns a provider code (and its error_text, if any) into an *Error
// with the class and suggested wait of the protocol's error table.
//
// Codes not in the table:
//   - "ERROR: 100x": rate limited, like MAX_USER_TURN;
//   - any other ERROR_…: ClassUnsolvable. An unknown code is most likely
//     about this task (nearly every ERROR_ code is), but it might be a new
//     transient or account condition. ClassUnsolvable retries a limited
//     number of times and then fails with the provider's code kept, so a
//     task is neither failed on a single odd answer nor retried forever;
//   - anything else (not an ERROR_ code at all): an answer we do not
//     understand, ClassTransient with Code BAD_ANSWER and the text kept.
func Classify(op, code, text string) *Error {
	code = strings.TrimSpace(code)
	text = strings.TrimSpace(text)
	e := &Error{Op: op, Code: code, Text: text, answered: true}
	if s, ok := codeTable[code]; ok {
		e.Class, e.RetryAfter = s.Class, s.RetryAfter
		if e.Text == "" {
			e.Text = s.Text
		}
		return e
	}
	switch {
	case strings.HasPrefix(code, "ERROR: 100"):
		e.Class, e.RetryAfter = ClassRateLimit, RateLimitRetryAfter
		if e.Text == "" {
			e.Text = ErrTooManyRequests.Text
		}
	case strings.HasPrefix(code, "ERROR_") || strings.HasPrefix(code, "ERROR "):
		e.Class = ClassUnsolvable
		if e.Text == "" {
			e.Text = "unknown provider error"
		}
	default:
		e.Code = CodeBadAnswer
		e.Class = ClassTransient
		e.Text = "unexpected answer " + quoteShort(code)
		if text != "" {
			e.Text += " (" + text + ")"
		}
	}
	return e
}

// refusalTexts are what the services' error texts say when they refuse
// a task's type under a general code (ERROR_BAD_PARAMETERS, CapSolver's
// ERROR_INVALID_TASK_DATA): "hCaptcha is not supported by this service",
// "We do not support hcaptcha", "unsupported captcha type, please check if
// the type is correct", "Not found HCaptchaTaskProxyLess access".
var refusalTexts = []string{"not supported by this service", "do not support", "unsupported captcha type", "access. please contact"}

// TypeRefused reports whether e is a provider's answer to a submit that it
// does not take the task's type: in.php's ERROR_METHOD_CALL (2captcha
// since it withdrew hCaptcha), createTask's ERROR_TASK_NOT_SUPPORTED
// (CapMonster) and ERROR_TASK_TYPE_DEPRECATED (Anti-Captcha) on either
// protocol, and ERROR_BAD_PARAMETERS or ERROR_INVALID_TASK_DATA with a
// text that says so (refusalTexts). A refusal the client makes itself, with no request, is
// not one: the provider was not asked.
func (e *Error) TypeRefused() bool {
	if !e.answered || e.Op != "submit" {
		return false
	}
	if s := typeRefusalCodes[e.Code]; s != nil && s.Code == CodeUnsupportedType {
		return true
	}
	switch e.Code {
	case ErrMethodCall.Code, CodeUnsupportedType:
		return true
	case ErrBadParameters.Code, "ERROR_INVALID_TASK_DATA":
		text := strings.ToLower(e.Text)
		for _, r := range refusalTexts {
			if strings.Contains(text, r) {
				return true
			}
		}
	}
	return false
}

// TypeRefused reports whether err has a provider's refusal of a task's
// type in its chain (Error.TypeRefused).
func TypeRefused(err error) bool {
	var pe *Error
	return errors.As(err, &pe) && pe.TypeRefused()
}

// ClassOf says what to do about any error: the Class of an *Error in the
// chain; ClassTask for validation failures; ClassTransient for everything
// else, including context errors (test those with errors.Is(err,
// context.Canceled) or context.DeadlineExceeded: the chain keeps them).
func ClassOf(err error) Class {
	if err == nil {
		return ClassTransient
	}
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Class
	}
	var ve *ValidationError
	if errors.As(err, &ve) {
		return ClassTask
	}
	// Context errors land here too: a cancelled wait is worth retrying by
	// whoever still has time, and errors.Is still finds context.Canceled.
	return ClassTransient
}

// quoteShort quotes s for an error message, cut to a readable length so an
// HTML page does not flood the logs.
func quoteShort(s string) string {
	const max = 120
	r := []rune(s)
	if len(r) > max {
		s = string(r[:max]) + "…"
	}
	return strconv.Quote(s)
}
