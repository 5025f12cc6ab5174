package provider

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestClassifyEveryCode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		code       string
		class      Class
		sentinel   *Error
		retryAfter time.Duration
	}{
		{"ERROR_WRONG_USER_KEY", ClassAccount, ErrWrongUserKey, 0},
		{"ERROR_KEY_DOES_NOT_EXIST", ClassAccount, ErrKeyDoesNotExist, 0},
		{"ERROR_IP_NOT_ALLOWED", ClassAccount, ErrIPNotAllowed, 0},
		{"IP_BANNED", ClassAccount, ErrIPBanned, 5 * time.Minute},
		{"ERROR_IP_BANNED", ClassAccount, ErrIPBannedAlt, 5 * time.Minute},
		{"ERROR_NO_SLOT_AVAILABLE", ClassNoSlot, ErrNoSlotAvailable, 5 * time.Second},
		{"ERROR_ZERO_BALANCE", ClassNoSlot, ErrZeroBalance, 10 * time.Second},
		{"MAX_USER_TURN", ClassRateLimit, ErrMaxUserTurn, 10 * time.Second},
		{"ERROR_TOO_MUCH_REQUESTS", ClassRateLimit, ErrTooMuchRequests, 10 * time.Second},
		{"ERROR: 1001", ClassRateLimit, ErrTooManyRequests, 10 * time.Second},
		{"ERROR: 1002", ClassRateLimit, ErrTooManyRequests, 10 * time.Second},
		{"ERROR: 1003", ClassRateLimit, ErrTooManyRequests, 10 * time.Second},
		{"ERROR: 1004", ClassRateLimit, ErrTooManyRequests, 10 * time.Second},
		{"ERROR: 1005", ClassRateLimit, ErrTooManyRequests, 10 * time.Second},
		{"ERROR_PAGEURL", ClassTask, ErrPageURL, 0},
		{"ERROR_GOOGLEKEY", ClassTask, ErrGoogleKey, 0},
		{"ERROR_BAD_PARAMETERS", ClassTask, ErrBadParameters, 0},
		{"ERROR_BAD_TOKEN_OR_PAGEURL", ClassTask, ErrBadTokenOrPageURL, 0},
		{"ERROR_CAPTCHAIMAGE_BLOCKED", ClassTask, ErrCaptchaImageBlocked, 0},
		{"ERROR_DOMAIN_NOT_ALLOWED", ClassTask, ErrDomainNotAllowed, 0},
		{"ERROR_WRONG_FILE_EXTENSION", ClassTask, ErrWrongFileExtension, 0},
		{"ERROR_IMAGE_TYPE_NOT_SUPPORTED", ClassTask, ErrImageTypeNotSupported, 0},
		{"ERROR_TOO_BIG_CAPTCHA_FILESIZE", ClassTask, ErrTooBigCaptchaFilesize, 0},
		{"ERROR_ZERO_CAPTCHA_FILESIZE", ClassTask, ErrZeroCaptchaFilesize, 0},
		{"ERROR_UPLOAD", ClassTask, ErrUpload, 0},
		{"ERROR_WRONG_ID_FORMAT", ClassTask, ErrWrongIDFormat, 0},
		{"ERROR_WRONG_CAPTCHA_ID", ClassTask, ErrWrongCaptchaID, 0},
		{"ERROR_EMPTY_ACTION", ClassTask, ErrEmptyAction, 0},
		{"ERROR_METHOD_CALL", ClassTask, ErrMethodCall, 0},
		{"ERROR_TOKEN_EXPIRED", ClassTask, ErrTokenExpired, 0},
		{"ERROR_BAD_PROXY", ClassTask, ErrBadProxy, 0},
		{"ERROR_PROXY_CONNECTION_FAILED", ClassTask, ErrProxyConnectionFailed, 0},
		{"ERROR_REPORT_NOT_RECORDED", ClassTask, ErrReportNotRecorded, 0},
		{"ERROR_DUPLICATE_REPORT", ClassTask, ErrDuplicateReport, 0},
		{"ERROR_CAPTCHA_UNSOLVABLE", ClassUnsolvable, ErrCaptchaUnsolvable, 0},
		{"ERROR_BAD_DUPLICATES", ClassUnsolvable, ErrBadDuplicates, 0},
		{"HTTP_5XX", ClassTransient, ErrHTTP5xx, 0},
		{"NETWORK", ClassTransient, ErrNetwork, 0},
		{"BAD_ANSWER", ClassTransient, ErrBadAnswer, 0},
		{"INVALID_TASK", ClassTask, ErrInvalidTask, 0},
		{"UNSUPPORTED_TYPE", ClassTask, ErrUnsupportedType, 0},
	}
	classSentinel := map[Class]*Error{
		ClassTransient: ErrClassTransient, ClassNoSlot: ErrClassNoSlot, ClassRateLimit: ErrClassRateLimit,
		ClassUnsolvable: ErrClassUnsolvable, ClassTask: ErrClassTask, ClassAccount: ErrClassAccount,
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			t.Parallel()
			e := Classify("submit", tt.code, "")
			if e.Code != tt.code || e.Class != tt.class || e.RetryAfter != tt.retryAfter || e.Op != "submit" {
				t.Fatalf("Classify(%q) = code %q class %v retry %v op %q; want %q %v %v submit",
					tt.code, e.Code, e.Class, e.RetryAfter, e.Op, tt.code, tt.class, tt.retryAfter)
			}
			if !errors.Is(e, tt.sentinel) {
				t.Errorf("errors.Is(%v, sentinel %s) = false", e, tt.sentinel.Code)
			}
			if !errors.Is(fmt.Errorf("wrapped: %w", e), tt.sentinel) {
				t.Errorf("wrapped error does not match its sentinel")
			}
			for c, s := range classSentinel {
				if got := errors.Is(e, s); got != (c == tt.class) {
					t.Errorf("errors.Is(%s, class sentinel %v) = %v", tt.code, c, got)
				}
			}
			if got := ClassOf(fmt.Errorf("x: %w", e)); got != tt.class {
				t.Errorf("ClassOf = %v, want %v", got, tt.class)
			}
			if e.Text == "" {
				t.Errorf("no text for %s", tt.code)
			}
			if tt.sentinel.Class != tt.class || tt.sentinel.RetryAfter != tt.retryAfter {
				t.Errorf("sentinel %s carries class %v retry %v", tt.sentinel.Code, tt.sentinel.Class, tt.sentinel.RetryAfter)
			}
		})
	}
}

func TestClassifyUnknown(t *testing.T) {
	t.Parallel()
	e := Classify("poll", "ERROR_SOMETHING_NEW", "a new condition")
	if e.Class != ClassUnsolvable || e.Code != "ERROR_SOMETHING_NEW" || e.Text != "a new condition" {
		t.Fatalf("unknown ERROR_ code: %+v", e)
	}
	if got, want := e.Error(), "poll: ERROR_SOMETHING_NEW: a new condition"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	e = Classify("poll", "<html>502 Bad Gateway</html>", "")
	if e.Class != ClassTransient || e.Code != CodeBadAnswer {
		t.Fatalf("non-code answer: %+v", e)
	}
	if got, want := e.Error(), `poll: BAD_ANSWER: unexpected answer "<html>502 Bad Gateway</html>"`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if errors.Is(e, ErrPageURL) {
		t.Error("BAD_ANSWER matches ErrPageURL")
	}
}

func TestErrorFormatAndUnwrap(t *testing.T) {
	t.Parallel()
	cause := context.DeadlineExceeded
	e := &Error{Op: "poll", Code: CodeNetwork, Class: ClassTransient, Text: "cannot reach the provider", Err: cause}
	if got, want := e.Error(), "poll: NETWORK: cannot reach the provider: context deadline exceeded"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(e, context.DeadlineExceeded) {
		t.Error("Unwrap does not reach the cause")
	}
	if got := ClassOf(context.Canceled); got != ClassTransient {
		t.Errorf("ClassOf(context.Canceled) = %v", got)
	}
	if got := ClassOf(&ValidationError{Field: "params.pageurl", Reason: "x"}); got != ClassTask {
		t.Errorf("ClassOf(ValidationError) = %v", got)
	}
	if got, want := (&Error{}).Error(), "provider error (transient)"; got != want {
		t.Errorf("empty Error() = %q, want %q", got, want)
	}
	// A bare *Error with no code is not a class sentinel: it must not match.
	if errors.Is(e, &Error{Class: ClassTransient}) {
		t.Error("a codeless non-sentinel *Error matched")
	}
}

func TestClassString(t *testing.T) {
	t.Parallel()
	want := map[Class]string{
		ClassTransient: "transient", ClassNoSlot: "no_slot", ClassRateLimit: "rate_limit",
		ClassUnsolvable: "unsolvable", ClassTask: "task", ClassAccount: "account", Class(42): "class(42)",
	}
	for c, s := range want {
		if c.String() != s {
			t.Errorf("%d.String() = %q, want %q", int(c), c.String(), s)
		}
	}
}

// Each service's answer that it does not take a task's type is a refusal
// of the type; the same codes to other requests, other texts, and the
// client's own refusals (no request sent) are not.
func TestTypeRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"2captcha's hCaptcha", Classify("submit", "ERROR_METHOD_CALL", ""), true},
		{"a front's UNSUPPORTED_TYPE", Classify("submit", "UNSUPPORTED_TYPE", "hcaptcha is not solved here"), true},
		{"CaptchaAI's not supported", Classify("submit", "ERROR_BAD_PARAMETERS", "hCaptcha is not supported by this service."), true},
		{"wrapped", fmt.Errorf("lane a: %w", Classify("submit", "ERROR_METHOD_CALL", "")), true},
		{"CapMonster's, on in.php", Classify("submit", "ERROR_TASK_NOT_SUPPORTED", ""), true},
		{"CapSolver's, on in.php", Classify("submit", "ERROR_INVALID_TASK_DATA", "We do not support hcaptcha"), true},
		{"a bad field", Classify("submit", "ERROR_BAD_PARAMETERS", "pageurl is missing or empty."), false},
		{"res.php's unknown action", Classify("poll", "ERROR_METHOD_CALL", ""), false},
		{"another task error", Classify("submit", "ERROR_PAGEURL", ""), false},
		{"the client's own", &Error{Op: "submit", Code: CodeUnsupportedType, Class: ClassTask}, false},
		{"the sentinel", ErrUnsupportedType, false},
		{"not a provider error", errors.New("ERROR_METHOD_CALL"), false},
	} {
		if got := TypeRefused(tc.err); got != tc.want {
			t.Errorf("%s: TypeRefused(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
