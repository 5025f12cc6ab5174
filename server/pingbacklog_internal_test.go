package server

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
)

// A failed pingback is logged with its URL's scheme and host only: clients
// are told to put a secret in the path or the query.
func TestPingbackFailureLogsNoSecret(t *testing.T) {
	t.Parallel()
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(refusing.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there: connection refused

	for _, tc := range []struct {
		name, base string
		allow      bool
	}{
		{"HTTP 500", refusing.URL, true},
		{"connection refused", closed, true},
		{"internal address refused", refusing.URL, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// slog's handler serializes the senders' writes, and close
			// waits for the senders, so the buffer is read after them.
			var logs bytes.Buffer
			p := pingbackParams{timeout: 10 * time.Second, attempts: 2, parallel: 1, log: slog.New(slog.NewTextHandler(&logs, nil))}
			if tc.allow {
				p.allow = testLoopback
			}
			ps := newPingbackSender(p)
			target := tc.base + "/hooks/path-s3cret?token=query-s3cret"
			st := records{"qa/1": {Task: captchaq.Task{ID: "qa/1", Pingback: target}}, "qa/2": {Task: captchaq.Task{ID: "qa/2", Pingback: formPingback + target}}}
			ps.enqueue(st, captchaq.Result{ID: "qa/1", Status: captchaq.StatusSolved, Token: "T"}, "1")
			ps.enqueue(st, captchaq.Result{ID: "qa/2", Status: captchaq.StatusSolved, Token: "T"}, "2")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			waitCount(t, ps, "failed", 2)
			ps.close(ctx) // every log line is written once the senders stop
			got := logs.String()
			if strings.Contains(got, "s3cret") {
				t.Errorf("the log holds the pingback's secret:\n%s", got)
			}
			if n := strings.Count(got, `pingback=`+tc.base+" "); n != 2 {
				t.Errorf("want 2 lines naming pingback=%s, got %d:\n%s", tc.base, n, got)
			}
		})
	}
}
