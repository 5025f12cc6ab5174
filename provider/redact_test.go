package provider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// keyLeaks reports whether err's text, in any common formatting, shows the
// key raw or URL-encoded.
func keyLeaks(err error) bool {
	for _, s := range []string{err.Error(), fmt.Sprintf("%v", err), fmt.Sprintf("%+v", err), fmt.Sprintf("%s", err)} {
		if strings.Contains(s, testKey) || strings.Contains(s, url.QueryEscape(testKey)) {
			return true
		}
	}
	return false
}

// everyCall makes each kind of request the client has and returns the
// errors.
func everyCall(ctx context.Context, c *Client) map[string]error {
	out := map[string]error{}
	_, out["submit"] = c.Submit(ctx, Turnstile{SiteKey: "s", PageURL: "https://a.example/"}.Task(), "")
	_, out["poll"] = c.Poll(ctx, "1")
	_, out["pollmany bulk"] = c.PollMany(ctx, []string{"1", "2"})
	_, out["balance"] = c.Balance(ctx)
	out["reportbad"] = c.ReportBad(ctx, "1")
	out["reportgood"] = c.ReportGood(ctx, "1")
	_, out["threadsinfo"] = c.ThreadsInfo(ctx)
	return out
}

func TestNetworkErrorsNeverShowTheKey(t *testing.T) {
	t.Parallel()
	t.Run("connection refused", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.NotFoundHandler())
		base := srv.URL
		srv.Close()
		for _, mode := range []BulkMode{BulkAuto, BulkOff} {
			c, err := NewClient(ClientConfig{BaseURL: base, Key: testKey, BulkPoll: mode})
			if err != nil {
				t.Fatal(err)
			}
			for call, err := range everyCall(context.Background(), c) {
				if err == nil || !errors.Is(err, ErrNetwork) || ClassOf(err) != ClassTransient {
					t.Errorf("%s: err = %v, want a transient NETWORK error", call, err)
					continue
				}
				if keyLeaks(err) {
					t.Errorf("%s: key in %q", call, err)
				}
				var ue *url.Error
				if call != "submit" && (!errors.As(err, &ue) || !strings.Contains(ue.URL, "?"+redactedText)) {
					t.Errorf("%s: url.Error not kept with a redacted query: %v", call, err)
				}
			}
		}
	})
	t.Run("deadline", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}))
		t.Cleanup(srv.Close)
		t.Cleanup(func() { close(release) })
		c, _ := NewClient(ClientConfig{BaseURL: srv.URL, Key: testKey})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		for call, err := range everyCall(ctx, c) {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s: err = %v, want DeadlineExceeded in the chain", call, err)
			}
			if keyLeaks(err) {
				t.Errorf("%s: key in %q", call, err)
			}
		}
	})
	t.Run("canceled", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.NotFoundHandler())
		t.Cleanup(srv.Close)
		c, _ := NewClient(ClientConfig{BaseURL: srv.URL, Key: testKey})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		for call, err := range everyCall(ctx, c) {
			if !errors.Is(err, context.Canceled) || keyLeaks(err) {
				t.Errorf("%s: err = %v", call, err)
			}
		}
	})
	t.Run("redirect loop", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, r.URL.String(), http.StatusFound)
		}))
		t.Cleanup(srv.Close)
		c, _ := NewClient(ClientConfig{BaseURL: srv.URL, Key: testKey})
		for call, err := range everyCall(context.Background(), c) {
			if err == nil || keyLeaks(err) {
				t.Errorf("%s: err = %v", call, err)
			}
		}
	})
	t.Run("transport echoing the URL", func(t *testing.T) {
		t.Parallel()
		hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return nil, fmt.Errorf("proxy refused %s (raw key %s)", r.URL, testKey)
		})}
		c, _ := NewClient(ClientConfig{BaseURL: "http://127.0.0.1:9", Key: testKey, HTTPClient: hc})
		for call, err := range everyCall(context.Background(), c) {
			if err == nil || keyLeaks(err) {
				t.Errorf("%s: err = %v", call, err)
			}
			if err != nil && !strings.Contains(err.Error(), "proxy refused") {
				t.Errorf("%s: the cause was lost: %v", call, err)
			}
		}
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
