package server_test

import (
	"io"
	"net/http"
	"net/url"
	"sync"
	"testing"

	"github.com/captchaq/captchaq/internal/reportfwd"
	"github.com/captchaq/captchaq/server"
)

// 50 reports of one task, at once, make one request to the provider: a
// task is reported once, and the repeats are answered without it. Reports
// count against the client's rate like submits.
func TestReportsForwardedOnce(t *testing.T) {
	t.Parallel()
	const keySlow = "slow-key-00001"
	b := setup(t, options{clients: []server.Client{
		{Name: "qa", Key: keyQA}, {Name: "slow", Key: keySlow, Rate: 0.01}, {Name: "ops", Key: keyAdmin, Admin: true},
	}, server: func(c *server.Config) {
		// As captchaq serve does: to the provider that solved it.
		c.Report = reportfwd.New(c.Queue).ForwardResult
	}})
	id := b.inOK(t, keyQA, turnstile())
	if v := b.waitFinal(t, keyQA, id); v.Status != "solved" {
		t.Fatalf("task: %+v", v)
	}
	report := func(key, action, id string) (string, error) {
		resp, err := b.http.Get(b.url + "/res.php?" + url.Values{"key": {key}, "action": {action}, "id": {id}}.Encode())
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return string(body), err
	}
	var wg sync.WaitGroup
	answers := make(chan string, 50)
	for range 50 {
		wg.Go(func() {
			got, err := report(keyQA, "reportbad", id)
			if err != nil {
				t.Error(err)
			}
			answers <- got
		})
	}
	wg.Wait()
	close(answers)
	for got := range answers {
		if got != "OK_REPORT_RECORDED" {
			t.Errorf("reportbad: %q, want OK_REPORT_RECORDED", got)
		}
	}
	if got, _ := report(keyQA, "reportgood", id); got != "OK_REPORT_RECORDED" {
		t.Errorf("reportgood after the bad ones: %q", got)
	}
	st := b.sim.Stats()
	if st.Calls.Report != 1 || st.ReportsBad != 1 || st.ReportsGood != 0 {
		t.Errorf("the provider got %d report calls (%d bad, %d good), want 1 (1 bad)", st.Calls.Report, st.ReportsBad, st.ReportsGood)
	}
	var view server.TaskView
	b.api(t, "GET", "/v1/tasks/"+id, keyQA, "", http.StatusOK, &view)
	if view.Report != "bad" {
		t.Errorf("the task's report: %q, want bad", view.Report)
	}

	// A client at its rate (one task per 100 s) that just submitted may
	// not report before its rate allows another task.
	slow := b.inOK(t, keySlow, turnstile())
	b.waitFinal(t, keySlow, slow)
	if got, _ := report(keySlow, "reportbad", slow); got != "MAX_USER_TURN" {
		t.Errorf("a report past the client's rate: %q, want MAX_USER_TURN", got)
	}
	if st := b.sim.Stats(); st.Calls.Report != 1 {
		t.Errorf("the provider got %d report calls, want still 1", st.Calls.Report)
	}
}
