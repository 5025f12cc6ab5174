package provider

import (
	"context"
	"errors"
	"net/url"
	"strings"
)

// redactedText replaces the key wherever it shows.
const redactedText = "REDACTED"

// redact returns err with the account key removed from its text. net/http
// errors are *url.Error values whose URL carries the query, key included,
// for GET requests; their URL is rewritten. Anything else still showing
// the key is replaced by a keyless copy that keeps errors.Is working for
// context errors and timeouts.
func (c *Client) redact(err error) error {
	if err == nil {
		return nil
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = &url.Error{Op: ue.Op, URL: redactURL(ue.URL), Err: ue.Err}
	}
	if !c.leaks(err.Error()) {
		return err
	}
	return &redactedError{msg: c.scrub(err.Error()), cause: keylessCause(err)}
}

func (c *Client) leaks(s string) bool {
	return strings.Contains(s, c.key) || strings.Contains(s, url.QueryEscape(c.key))
}

func (c *Client) scrub(s string) string {
	s = strings.ReplaceAll(s, c.key, redactedText)
	return strings.ReplaceAll(s, url.QueryEscape(c.key), redactedText)
}

// redactURL drops the query: it holds the key, and ids are not needed to
// understand a network failure.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		if i := strings.IndexByte(s, '?'); i >= 0 {
			return s[:i] + "?" + redactedText
		}
		return s
	}
	if u.RawQuery != "" {
		u.RawQuery = redactedText
	}
	u.User = nil
	return u.String()
}

// keylessCause keeps the one thing callers test for in a network error.
func keylessCause(err error) error {
	for _, e := range []error{context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, e) {
			return e
		}
	}
	return nil
}

type redactedError struct {
	msg   string
	cause error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.cause }
