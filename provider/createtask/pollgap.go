package createtask

import (
	"net/url"
	"strings"
	"time"
)

// PollGapDefault is the shortest time between two getTaskResult calls for
// one task that a Client keeps to when its service publishes nothing
// else: CapMonster Cloud's rule (at most one every 2 s; faster polls are
// answered ERROR_TOO_MUCH_REQUESTS), and the cadence Anti-Captcha's own
// integration guide polls at.
const PollGapDefault = 2 * time.Second

// publishedPollGaps are the services that ask for a longer wait between
// two getTaskResult calls of one task than PollGapDefault, by host.
var publishedPollGaps = map[string]time.Duration{
	// 2captcha's API v2: "wait at least 5 seconds and repeat the
	// request"; too frequent requests block the account or IP for a while.
	"api.2captcha.com":  5 * time.Second,
	"api.rucaptcha.com": 5 * time.Second,
	// CapSolver: "processing: retry after 3 seconds" (and at most 120
	// getTaskResult calls a task).
	"api.capsolver.com": 3 * time.Second,
}

// PublishedPollGap is the shortest time between two getTaskResult calls
// for one task that the service at baseURL publishes: 5 s at 2captcha
// (and RuCaptcha), 3 s at CapSolver, PollGapDefault (2 s) elsewhere
// (CapMonster Cloud, Anti-Captcha, a simulator).
func PublishedPollGap(baseURL string) time.Duration {
	if u, err := url.Parse(strings.TrimSpace(baseURL)); err == nil {
		if g, ok := publishedPollGaps[strings.ToLower(u.Hostname())]; ok {
			return g
		}
	}
	return PollGapDefault
}

// PollGap is the shortest time between two polls of one task at the
// Client's service (PublishedPollGap of its base URL). The queue keeps to
// it for a provider whose ProviderConfig.PollGap is left 0.
func (c *Client) PollGap() time.Duration { return PublishedPollGap(c.root) }
