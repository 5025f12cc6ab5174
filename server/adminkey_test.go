package server_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// dashboardCSP is the policy every page of the server carries: scripts,
// styles and calls from the server's own origin only, no framing.
const dashboardCSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// The admin key travels in a header or a form, never in a URL, where
// it would stay in the browser's history and go out as Referer.
func TestAdminKeyNeverInURL(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})

	resp, err := b.http.Get(b.url + "/?key=" + keyAdmin)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusBadRequest || strings.Contains(body, keyAdmin) || !strings.Contains(body, "type it into the page's form") {
		t.Errorf("/?key=: HTTP %d %q", resp.StatusCode, body)
	}

	for _, path := range []string{"/", "/app.js", "/v1/stats", "/in.php"} {
		resp, err := b.http.Get(b.url + path)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		h := resp.Header
		if h.Get("Referrer-Policy") != "no-referrer" || h.Get("Content-Security-Policy") != dashboardCSP || h.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: Referrer-Policy %q, CSP %q, X-Frame-Options %q", path, h.Get("Referrer-Policy"), h.Get("Content-Security-Policy"), h.Get("X-Frame-Options"))
		}
	}
	// The page itself reads no key from its address.
	resp, err = b.http.Get(b.url + "/app.js")
	if err != nil {
		t.Fatal(err)
	}
	if js := readAll(t, resp); strings.Contains(js, "location.search") || !strings.Contains(js, `Authorization: "Bearer "`) {
		t.Errorf("app.js reads the address or sends no header")
	}
	resp, err = b.http.Get(b.url + "/charts.js")
	if err != nil {
		t.Fatal(err)
	}
	if js := readAll(t, resp); strings.Contains(js, "location.search") {
		t.Errorf("charts.js reads the address")
	}

	// The event stream takes a client's key from the URL (EventSource
	// sends no header), never an admin's, which sees every client.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := func(key string) int {
		req, _ := http.NewRequestWithContext(ctx, "GET", b.url+"/v1/events?key="+key, nil)
		resp, err := b.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := events(keyAdmin); got != http.StatusUnauthorized {
		t.Errorf("/v1/events?key=<admin key>: HTTP %d, want 401", got)
	}
	if got := events(keyQA); got != http.StatusOK {
		t.Errorf("/v1/events?key=<client key>: HTTP %d, want 200", got)
	}
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	var sb strings.Builder
	if _, err := io.Copy(&sb, resp.Body); err != nil {
		t.Fatal(err)
	}
	return sb.String()
}
