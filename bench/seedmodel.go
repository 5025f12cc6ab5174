package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// SeedModel is a faithful Go model of the seed articles' asyncio queue
// (AsyncCaptchaQueue.solve_batch): a semaphore of Concurrency slots; each task
// holds a slot while it submits to in.php, then sleeps PollEvery and polls its
// own id with res.php, up to MaxPolls times. A submit error (including "no
// free thread") fails the task; nothing is retried. It is the baseline the
// engine is measured against, not something to use.
type SeedModel struct {
	BaseURL     string
	Key         string
	Concurrency int
	PollEvery   time.Duration // the seed's asyncio.sleep(5)
	MaxPolls    int           // the seed's range(30)
	HTTPClient  *http.Client
}

// SeedResult is one task's outcome in the seed model.
type SeedResult struct {
	Token string
	Err   error
}

// SolveBatch runs tasks the way the seed does and returns results in input
// order.
func (m SeedModel) SolveBatch(ctx context.Context, tasks []SeedTask) []SeedResult {
	sem := make(chan struct{}, m.Concurrency)
	results := make([]SeedResult, len(tasks))
	var wg sync.WaitGroup
	for i, t := range tasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				results[i].Err = ctx.Err()
				return
			}
			defer func() { <-sem }()
			tok, err := m.solve(ctx, t)
			results[i] = SeedResult{Token: tok, Err: err}
		}()
	}
	wg.Wait()
	return results
}

// SeedTask is a task dict of the seed: a method and its params.
type SeedTask struct {
	Method string
	Params map[string]string
}

type seedAnswer struct {
	Status  int             `json:"status"`
	Request json.RawMessage `json:"request"`
}

func (a seedAnswer) text() string {
	var s string
	if json.Unmarshal(a.Request, &s) == nil {
		return s
	}
	return string(a.Request)
}

func (m SeedModel) solve(ctx context.Context, t SeedTask) (string, error) {
	form := url.Values{"key": {m.Key}, "method": {t.Method}, "json": {"1"}}
	for k, v := range t.Params {
		form.Set(k, v)
	}
	var sub seedAnswer
	if err := m.do(ctx, http.MethodPost, m.BaseURL+"/in.php", form, &sub); err != nil {
		return "", err
	}
	if sub.Status != 1 {
		return "", fmt.Errorf("submit error: %s", sub.text())
	}
	id := sub.text()
	for range m.MaxPolls {
		select {
		case <-time.After(m.PollEvery):
		case <-ctx.Done():
			return "", ctx.Err()
		}
		q := url.Values{"key": {m.Key}, "action": {"get"}, "id": {id}, "json": {"1"}}
		var res seedAnswer
		if err := m.do(ctx, http.MethodGet, m.BaseURL+"/res.php?"+q.Encode(), nil, &res); err != nil {
			return "", err
		}
		if res.Status == 1 {
			return res.text(), nil
		}
		if res.text() == "ERROR_CAPTCHA_UNSOLVABLE" {
			return "", fmt.Errorf("captcha unsolvable")
		}
	}
	return "", fmt.Errorf("solve timed out")
}

func (m SeedModel) do(ctx context.Context, method, u string, form url.Values, into *seedAnswer) error {
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return err
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := m.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: request failed", method, req.URL.Path)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		return fmt.Errorf("%s %s: unparseable answer (HTTP %d)", method, req.URL.Path, resp.StatusCode)
	}
	return nil
}
