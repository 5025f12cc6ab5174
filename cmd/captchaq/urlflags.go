package main

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// URL flags are checked when a command starts, each naming its flag and the
// fix (exit 2), before anything connects: a URL that cannot work fails
// here, not on every task. No message shows a URL's password.

// shownURL is u for a message: the user and password, when present, as ***.
func shownURL(u string) string {
	at := strings.LastIndex(u, "@")
	if at < 0 {
		return strconv.Quote(u)
	}
	if i := strings.Index(u, "://"); i >= 0 && i < at {
		return strconv.Quote(u[:i+3] + "***" + u[at:])
	}
	return strconv.Quote("***" + u[at:])
}

// checkURL returns why u is not a URL of one of schemes with a host (and,
// unless userOK, no user or password), or "". example is a URL that works.
func checkURL(u string, schemes []string, userOK bool, example string) string {
	if strings.TrimSpace(u) != u {
		return shownURL(u) + " has spaces around it; give the URL alone"
	}
	p, err := url.Parse(u)
	if err != nil {
		return shownURL(u) + " is not a URL; give e.g. " + example
	}
	scheme := strings.ToLower(p.Scheme)
	if !strings.Contains(u, "://") {
		return shownURL(u) + " has no scheme; give e.g. " + example
	}
	ok := false
	for _, s := range schemes {
		ok = ok || scheme == s
	}
	switch {
	case !ok:
		return fmt.Sprintf("%s must start with %s://; give e.g. %s", shownURL(u), strings.Join(schemes, ":// or "), example)
	case p.Host == "" || p.Hostname() == "":
		return shownURL(u) + " has no host; give e.g. " + example
	case !userOK && p.User != nil:
		return shownURL(u) + " must not carry a user or password (they would be sent and logged with it)"
	case p.RawQuery != "" || p.ForceQuery || p.Fragment != "":
		return shownURL(u) + " must not carry a query or fragment; give e.g. " + example
	}
	return ""
}

// checkAMQPURL checks a broker URL (--amqp, CAPTCHAQ_AMQP_URL).
func checkAMQPURL(u string) error {
	if reason := checkURL(u, []string{"amqp", "amqps"}, true, "amqp://USER:PASS@HOST:5672/ (amqps:// for TLS)"); reason != "" {
		return usageError(fmt.Errorf("--amqp (or $%s): %s", envAMQPURL, reason))
	}
	return nil
}

// checkAPIURL checks the provider's base URL: --api-url, else
// CAPTCHAAI_URL.
func checkAPIURL(env *environment, apiURL string) error {
	name := "--api-url"
	if strings.TrimSpace(apiURL) == "" {
		name = "$" + envURL
	}
	if reason := checkURL(providerURL(env, apiURL), []string{"http", "https"}, false, "https://ocr.captchaai.com"); reason != "" {
		return usageError(fmt.Errorf("%s: %s", name, reason))
	}
	return nil
}
