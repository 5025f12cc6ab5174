package provider

import (
	"net/url"
	"strings"
	"time"
)

// publishedReportWindows are the services that publish how long after a
// task's answer they take a report on it, by host, for both protocols.
// CapMonster Cloud and CapSolver publish none.
var publishedReportWindows = map[string]time.Duration{
	// 2captcha: ERROR_REPORT_NOT_RECORDED when "more than 15 minutes
	// passed" (in.php and API v2 alike; RuCaptcha is the same service).
	"2captcha.com":      15 * time.Minute,
	"api.2captcha.com":  15 * time.Minute,
	"rucaptcha.com":     15 * time.Minute,
	"api.rucaptcha.com": 15 * time.Minute,
	// Anti-Captcha: "Reports must be sent within 60 seconds of task
	// completion", ERROR_NO_SUCH_CAPCHA_ID after.
	"api.anti-captcha.com": 60 * time.Second,
}

// PublishedReportWindow is how long after an answer the service at
// baseURL takes a report on it, as it publishes: 15 minutes at 2captcha
// (and RuCaptcha), 60 s at Anti-Captcha, 0 (unknown) elsewhere.
func PublishedReportWindow(baseURL string) time.Duration {
	if u, err := url.Parse(strings.TrimSpace(baseURL)); err == nil {
		return publishedReportWindows[strings.ToLower(u.Hostname())]
	}
	return 0
}
