// Package tasktest is the one table of valid and invalid tasks that every
// door's test runs: the library's Queue, the CLI's batch, solve and enqueue,
// the service's in.php and JSON API, and the fleet's gateway. Each door must
// accept the valid ones and refuse the others with the same code. Checks
// counts the checks a door puts its tasks through, for the tests that
// prove it validates each task once.
package tasktest

import "encoding/json"

// Case is one task and what every door must make of it.
type Case struct {
	Name   string
	Method string
	Params map[string]string
	// Code is "" for a task every door accepts, else the Result.ErrorCode
	// every door refuses it with: INVALID_TASK or UNSUPPORTED_TYPE.
	Code string
	// Field is what the refusal names (its field or the type).
	Field string
	// FrontCode is in.php's protocol code for the refusal.
	FrontCode string
}

// Cases is the table.
var Cases = []Case{
	{Name: "turnstile https", Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAA", "pageurl": "https://shop.example/checkout"}},
	// The provider solves captchas on plain-http pages too, and real sites
	// still serve some: http:// is accepted.
	{Name: "turnstile http", Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAA", "pageurl": "http://shop.example/checkout"}},
	{Name: "recaptcha", Method: "userrecaptcha", Params: map[string]string{"googlekey": "6Le-key", "pageurl": "https://shop.example/login"}},
	{Name: "missing sitekey", Method: "turnstile", Params: map[string]string{"pageurl": "https://shop.example/checkout"},
		Code: "INVALID_TASK", Field: "sitekey", FrontCode: "ERROR_BAD_PARAMETERS"},
	{Name: "pageurl without scheme", Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAA", "pageurl": "shop.example/checkout"},
		Code: "INVALID_TASK", Field: "pageurl", FrontCode: "ERROR_PAGEURL"},
	{Name: "pageurl ftp", Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAA", "pageurl": "ftp://shop.example/checkout"},
		Code: "INVALID_TASK", Field: "pageurl", FrontCode: "ERROR_PAGEURL"},
	{Name: "missing googlekey", Method: "userrecaptcha", Params: map[string]string{"pageurl": "https://shop.example/login"},
		Code: "INVALID_TASK", Field: "googlekey", FrontCode: "ERROR_GOOGLEKEY"},
	{Name: "hcaptcha", Method: "hcaptcha", Params: map[string]string{"sitekey": "10000000-ffff", "pageurl": "https://shop.example/checkout"},
		Code: "UNSUPPORTED_TYPE", Field: "hcaptcha", FrontCode: "ERROR_BAD_PARAMETERS"},
	{Name: "unknown method", Method: "frobnicate", Params: map[string]string{"pageurl": "https://shop.example/"},
		Code: "INVALID_TASK", Field: "method", FrontCode: "ERROR_BAD_PARAMETERS"},
	// No store holds a NUL byte as given (PostgreSQL text holds none):
	// refused at the door, before anything is published or submitted.
	{Name: "NUL in a param value", Method: "turnstile", Params: map[string]string{"sitekey": "0x4A\x00AA", "pageurl": "https://shop.example/checkout"},
		Code: "INVALID_TASK", Field: "holds a NUL byte", FrontCode: "ERROR_BAD_PARAMETERS"},
	{Name: "NUL in a param name", Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAA", "pageurl": "https://shop.example/checkout", "action\x00": "login"},
		Code: "INVALID_TASK", Field: "holds a NUL byte", FrontCode: "ERROR_BAD_PARAMETERS"},
}

// Line is c as one line of task JSONL with the given id.
func (c Case) Line(id string) string {
	b, err := json.Marshal(map[string]any{"id": id, "method": c.Method, "params": c.Params})
	if err != nil {
		panic(err) // strings only: cannot happen
	}
	return string(b)
}

// BackupMethods are those of the per-solve service in the tests of
// several providers: it solves hCaptcha, which the main plan (CaptchaAI's
// methods) does not.
var BackupMethods = []string{"base64", "hcaptcha", "turnstile", "userrecaptcha"}
