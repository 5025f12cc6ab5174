package provider

import "encoding/json"

// Answer is a solved task's answer.
type Answer struct {
	// Raw is the provider's answer verbatim: a token, an image's text, or a
	// JSON document for structured types (GeeTest, Cloudflare Challenge).
	Raw string
	// Token is what to put in the target page's form. For token and text
	// types it equals Raw; for structured types it is the main value when
	// one can be found (cf_clearance), else Raw.
	Token string
	// JSON is Raw when Raw is a JSON document, else nil.
	JSON json.RawMessage
}

// PollResult is one id's state in a poll.
type PollResult struct {
	ID     string
	Ready  bool   // true: Answer is set
	Answer Answer // when Ready
	// Err is this id's failure (ERROR_CAPTCHA_UNSOLVABLE,
	// ERROR_WRONG_CAPTCHA_ID, ...) as an *Error; nil while not ready.
	Err error
}
