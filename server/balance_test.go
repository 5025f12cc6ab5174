package server_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/captchaq/captchaq/server"
)

// TestBalanceUnknownIsTemporary: a balance that cannot be read now (a
// gateway whose workers have not reported one) is the protocols' "try
// again later" in both, with the reason: getbalance answers
// ERROR_NO_SLOT_AVAILABLE, getBalance errorCode ERROR_NO_SLOT_AVAILABLE;
// never a parameter error.
func TestBalanceUnknownIsTemporary(t *testing.T) {
	t.Parallel()
	const why = "no worker has reported the provider's balance yet"
	b := setup(t, options{server: func(c *server.Config) {
		c.Balance = func(context.Context) (float64, error) { return 0, errors.New(why) }
	}})
	got := b.form(t, http.MethodGet, "/res.php", url.Values{"key": {keyQA}, "action": {"getbalance"}, "json": {"1"}})
	if !strings.Contains(got, `"request":"ERROR_NO_SLOT_AVAILABLE"`) || !strings.Contains(got, why) || !strings.Contains(got, `"status":0`) {
		t.Errorf("getbalance: %s, want ERROR_NO_SLOT_AVAILABLE with the reason", got)
	}
	if got := b.form(t, http.MethodGet, "/res.php", url.Values{"key": {keyQA}, "action": {"getbalance"}}); got != server.CodeBalanceUnknown {
		t.Errorf("getbalance, plain: %q, want %s", got, server.CodeBalanceUnknown)
	}
	m := b.ct(t, "getBalance", `{"clientKey":"`+keyQA+`"}`)
	if m["errorCode"] != "ERROR_NO_SLOT_AVAILABLE" || m["errorId"] == 0.0 || !strings.Contains(m["errorDescription"].(string), why) {
		t.Errorf("getBalance: %v, want errorCode ERROR_NO_SLOT_AVAILABLE with the reason", m)
	}
}
