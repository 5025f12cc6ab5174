package sim

import (
	"crypto/subtle"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/captchaq/captchaq/provider"
)

// gate is what a call must pass before it is served: the account's state
// (Account), the key, the poll bans, and for a submit the types the
// service takes (Config.Methods less the withdrawn). The Server's mu
// guards it, and the stats it counts in.
type gate struct {
	cfg     *Config
	st      *statsState
	account Account
	// withdrawn are methods of Config.Methods refused now (Withdraw).
	withdrawn []string
	bans      map[string]time.Time // client IP → end of its poll ban
}

// check checks bans and the key, which every call passes first: the
// code refusing it, or "".
func (g *gate) check(q *request, ip string, now time.Time) string {
	if g.account.IPBanned {
		return answerIPBanned
	}
	if until, ok := g.bans[ip]; ok {
		if now.Before(until) {
			return answerIPBanned
		}
		delete(g.bans, ip)
	}
	if g.account.BadKey || !g.keyOK(q.get("key")) {
		return "ERROR_WRONG_USER_KEY"
	}
	return ""
}

// keyOK checks a key against the configured one (any non-empty key when
// none is configured).
func (g *gate) keyOK(key string) bool {
	if key == "" {
		return false
	}
	return g.cfg.Key == "" || subtle.ConstantTimeCompare([]byte(key), []byte(g.cfg.Key)) == 1
}

// countPoll counts a poll of t against the poll-ban limit and reports
// whether it went over, which bans ip.
func (g *gate) countPoll(t *task, ip string, now time.Time) bool {
	t.polls++
	g.st.maxPollsPerTask = max(g.st.maxPollsPerTask, t.polls)
	pb := g.cfg.PollBan
	if pb.Disabled {
		return false
	}
	if t.pollCount == 0 || now.Sub(t.pollWindow) >= pb.Window {
		t.pollWindow, t.pollCount = now, 0
	}
	t.pollCount++
	if t.pollCount <= pb.Max {
		return false
	}
	g.bans[ip] = now.Add(pb.Duration)
	g.st.bans++
	t.pollCount = 0
	return true
}

// ProxyIPOnlyText is the text of Config.ProxyIPOnly's refusal.
const ProxyIPOnlyText = "Proxy IP address ipv4/ipv6 only: no host names or IP addresses from local networks."

// parseSubmit is parseSubmit with the server's methods and proxy rule
// (Config.ProxyIPOnly).
func (g *gate) parseSubmit(q *request) (spec taskSpec, code, text string) {
	spec, code, text = parseSubmit(q, g.cfg.Methods)
	if code != "" || !g.cfg.ProxyIPOnly || q.get("proxy") == "" {
		return spec, code, text
	}
	p, err := provider.ParseProxy(q.get("proxy"), q.get("proxytype"))
	if ip, perr := netip.ParseAddr(p.Host); err != nil || perr != nil || !ip.IsGlobalUnicast() || ip.IsPrivate() {
		return spec, "ERROR_BAD_PROXY", ProxyIPOnlyText
	}
	return spec, "", ""
}

// refusal is Config.Refusal for a submit of a type the service does not
// take: one parseSubmit refused as not served (text), or one of
// Withdraw's methods.
func (g *gate) refusal(q *request, text string) (Refusal, bool) {
	if q == nil {
		return Refusal{}, false
	}
	method := routeMethod(q)
	name := provider.TypeName(method)
	if !strings.HasSuffix(text, notSupported) && (name == "" || !slices.Contains(g.withdrawn, method)) {
		return Refusal{}, false
	}
	r := g.cfg.Refusal
	if strings.Contains(r.Text, "%s") {
		r.Text = fmt.Sprintf(r.Text, name)
	}
	return r, true
}

// refuse is the test hook Config.RefuseSubmit's answer, if any.
func (g *gate) refuse(q *request) string {
	if g.cfg.RefuseSubmit == nil || q == nil {
		return ""
	}
	return g.cfg.RefuseSubmit(q.params)
}

// balance is what getbalance answers: the configured balance less what
// solves cost.
func (g *gate) balance() float64 {
	if g.account.ZeroBalance {
		return 0
	}
	return g.cfg.Balance - g.st.spent
}
