package provider

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// CheckCallbackURL is the one checker of a URL called back when a task
// is solved (a pingback sent to the provider, a client's pingback or
// callbackUrl at the service): a page URL's rules (a full http or https
// URL), and no user or password, which would be sent and logged with it.
// It returns why v is refused, or "".
func CheckCallbackURL(v string) string {
	if reason := checkPageURL(v); reason != "" {
		return reason
	}
	if u, err := url.Parse(strings.TrimSpace(v)); err == nil && u.User != nil {
		return "must not carry a user or password (user:pass@); put a secret in the path instead"
	}
	return ""
}

func checkPageURL(v string) string {
	v = strings.TrimSpace(v)
	if v == "" {
		return "empty; the URL of the page that shows the captcha"
	}
	u, err := url.Parse(v)
	if err != nil {
		return fmt.Sprintf("%s is not a URL (%v); use the full address, e.g. https://example.com/login", quoteShort(v), errors.Unwrap(err))
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
	case "":
		return fmt.Sprintf("%s has no scheme; add https:// (e.g. https://%s)", quoteShort(v), strings.TrimPrefix(v, "//"))
	default:
		if u.Opaque != "" && !strings.Contains(v, "://") {
			// "example.com:8080/x" parses with scheme "example.com".
			return fmt.Sprintf("%s has no scheme; add https:// (e.g. https://%s)", quoteShort(v), v)
		}
		return fmt.Sprintf("%s must be an http or https URL", quoteShort(v))
	}
	if u.Host == "" {
		return fmt.Sprintf("%s has no host; use the full address, e.g. https://example.com/login", quoteShort(v))
	}
	return ""
}

func checkProxy(v string) string {
	if _, err := ParseProxy(v, ""); err != nil {
		return err.(*ValidationError).Reason
	}
	return ""
}

// checkProxyType, checkRecaptchaDomain and checkFlag take a value of a
// fixed set, read in any letter case.
var (
	checkProxyType = oneOf(strings.ToUpper, "is not a proxy type; use one of HTTP, HTTPS, SOCKS4, SOCKS5",
		"HTTP", "HTTPS", "SOCKS4", "SOCKS5")
	checkRecaptchaDomain = oneOf(strings.ToLower,
		"is not a domain reCAPTCHA loads from; use google.com or recaptcha.net (createTask's apiDomain)",
		"google.com", "recaptcha.net")
	checkFlag = oneOf(strings.ToLower, "is not 0 or 1", "0", "1", "true", "false")
)

// oneOf is a check that passes a value, trimmed and cased by norm, when it
// is one of allowed, and else says why: the value quoted, then why.
func oneOf(norm func(string) string, why string, allowed ...string) func(string) string {
	return func(v string) string {
		if slices.Contains(allowed, norm(strings.TrimSpace(v))) {
			return ""
		}
		return quoteShort(v) + " " + why
	}
}

func checkHost(v string) string {
	v = strings.TrimSpace(v)
	if v == "" || strings.ContainsAny(v, " /?#") && !strings.Contains(v, "://") {
		return fmt.Sprintf("%s is not a host name; give the API server's host, e.g. api.example.com", quoteShort(v))
	}
	return ""
}

// checkHTMLPage checks a challenge page's HTML, base64-encoded
// (createTask's htmlPageBase64).
func checkHTMLPage(v string) string {
	if _, err := decodeBase64(v); err != nil {
		return "not valid base64; send the challenge page's HTML base64-encoded (createTask's htmlPageBase64)"
	}
	return ""
}

// gridInstructions: a grid says what to select, in words or as an image.
func gridInstructions(t Task) error {
	if strings.TrimSpace(t.Params["textinstructions"]) == "" && strings.TrimSpace(t.Params["imginstructions"]) == "" {
		return &ValidationError{Field: "params.textinstructions", Reason: "required for " + string(KindGrid) + "; " + fTextInstr.hint}
	}
	return nil
}

func checkScore(v string) string {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || f <= 0 || f > 1 {
		return fmt.Sprintf("%s is not a score between 0.1 and 0.9 (0.3 is realistic)", quoteShort(v))
	}
	return ""
}

func checkBLSImage(v string) string {
	if strings.TrimSpace(v) == "" {
		return ""
	}
	if n := base64Size(v); n > MaxImageBytes {
		return fmt.Sprintf("the image is %d bytes; the provider takes at most %d (600 KiB)", n, MaxImageBytes)
	}
	b, err := decodeBase64(v)
	if err != nil {
		return "not valid base64; send each grid image as base64 or a data: URI"
	}
	if len(b) > MaxImageBytes {
		return fmt.Sprintf("the image is %d bytes; the provider takes at most %d (600 KiB)", len(b), MaxImageBytes)
	}
	return ""
}

func isTrue(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true":
		return true
	}
	return false
}
