package createtask

import (
	"net/url"
	"strings"
	"time"
)

// PollBudget is a service's published limit on polling one task: at most
// Polls getTaskResult calls, and none later than Window after the
// createTask (its result is gone by then). Zero fields: no such limit.
type PollBudget struct {
	Polls  int
	Window time.Duration
}

// publishedPollBudgets are the services that publish a PollBudget, by
// host. Anti-Captcha, 2captcha (and RuCaptcha) publish none.
var publishedPollBudgets = map[string]PollBudget{
	// CapMonster Cloud: "Limit: 120 requests per task. If the limit is
	// exceeded, the user's account may be temporarily locked"; a status
	// is answered only within 5 minutes of the upload
	// (ERROR_NO_SUCH_CAPCHA_ID after).
	"api.capmonster.cloud": {Polls: 120, Window: 5 * time.Minute},
	// CapSolver: at most 120 queries a task, within 5 minutes of its
	// creation; past either the result is lost.
	"api.capsolver.com": {Polls: 120, Window: 5 * time.Minute},
}

// PublishedPollBudget is the PollBudget the service at baseURL
// publishes: 120 polls within 5 minutes at CapMonster Cloud and
// CapSolver, none elsewhere.
func PublishedPollBudget(baseURL string) PollBudget {
	if u, err := url.Parse(strings.TrimSpace(baseURL)); err == nil {
		return publishedPollBudgets[strings.ToLower(u.Hostname())]
	}
	return PollBudget{}
}

// PollBudget is the published PollBudget of the Client's service. The
// queue keeps to it for a provider whose ProviderConfig.PollBudget and
// ResultWindow are left 0.
func (c *Client) PollBudget() PollBudget { return PublishedPollBudget(c.root) }
