package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
	"github.com/captchaq/captchaq/server"
	"github.com/captchaq/captchaq/sim"
)

func init() {
	commands["loadtest"] = command{summary: "measure the serve front on loopback against an instant simulator", run: runLoadtest}
}

func runLoadtest(ctx context.Context, env *environment, args []string) error {
	fs := env.flagSet("loadtest")
	workers := fs.Int("clients", 200, "concurrent client goroutines (1-2000)")
	reqRate := fs.Float64("rate", 1000, "total requests per second to the front (in.php and res.php together)")
	duration := fs.Duration("duration", 10*time.Second, "how long to submit (at most 2m); polling of the last tasks ends 10s after")
	pollEvery := fs.Duration("poll-every", 20*time.Millisecond, "each client's wait between res.php polls")
	frontURL := fs.String("front", "", "drive this running front (`URL` of a serve, a gateway or a balancer) instead of one of its own; the client key comes from "+loadtestKeyEnv)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: captchaq loadtest [--duration D] [--clients N] [--rate R] [--front URL] [flags]\n\nRuns a simulator and the serve front on loopback, drives the front with\nin.php submits and res.php polls, and reports requests/s, the time spent in\nthe front's handlers (its added latency) and whether every task got exactly\none result. With --front URL it drives a front that runs already (several\nreplicas behind a balancer, say): requests/s, the round trips clients see,\nand whether every task was answered.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *workers < 1 || *workers > 2000 || *duration <= 0 || *duration > 2*time.Minute || *reqRate <= 0 {
		return &exitError{code: 2, err: errors.New("--clients 1-2000, --duration up to 2m and a positive --rate, please")}
	}

	if *frontURL != "" {
		key := env.getenv(loadtestKeyEnv)
		if key == "" {
			return &exitError{code: 2, err: fmt.Errorf("--front: set %s to a client key of that front", loadtestKeyEnv)}
		}
		return driveFront(ctx, env, strings.TrimRight(*frontURL, "/"), key, loadShape{workers: *workers, rate: *reqRate, duration: *duration, pollEvery: *pollEvery}, nil)
	}
	ss, base, err := sim.Start(sim.Config{Instant: true, Threads: 1 << 20, PollBan: sim.PollBan{Disabled: true}}, "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ss.Close()
	pc, err := provider.NewClient(provider.ClientConfig{BaseURL: base, Key: "loadtest-provider-key"})
	if err != nil {
		return err
	}
	var handlerMu sync.Mutex
	handler := map[string][]time.Duration{}
	var resultsMu sync.Mutex
	results := map[string]int{}
	const key = "loadtest-client-key"
	srv, err := server.New(server.Config{
		Queue: captchaq.Config{Provider: pc, Threads: 5000, MaxQueued: 1 << 20, PollInterval: 10 * time.Millisecond,
			OnResult: func(r captchaq.Result) {
				resultsMu.Lock()
				results[r.ID]++
				resultsMu.Unlock()
			}},
		Clients: []server.Client{{Name: "load", Key: key}},
		ObserveRequest: func(route string, d time.Duration) {
			handlerMu.Lock()
			handler[route] = append(handler[route], d)
			handlerMu.Unlock()
		},
	})
	if err != nil {
		return err
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := newHTTPServer(srv.Handler())
	go hs.Serve(ln)
	return driveFront(ctx, env, "http://"+ln.Addr().String(), key, loadShape{workers: *workers, rate: *reqRate, duration: *duration, pollEvery: *pollEvery},
		&ownFront{handler: handler, results: results, resultsMu: &resultsMu, stop: func() {
			hs.Shutdown(context.Background())
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			srv.Shutdown(sctx)
		}})
}

// loadtestKeyEnv names the variable that holds the client key for
// loadtest --front (a key is never a flag value that shows in ps).
const loadtestKeyEnv = "CAPTCHAQ_LOADTEST_KEY"

// loadShape is the load a loadtest puts on a front.
type loadShape struct {
	workers   int
	rate      float64
	duration  time.Duration
	pollEvery time.Duration
}

// ownFront is loadtest's own front, whose handlers and results it sees.
type ownFront struct {
	handler   map[string][]time.Duration
	results   map[string]int
	resultsMu *sync.Mutex
	stop      func()
}

// driveFront drives the front at base with the client key and reports;
// own is the front loadtest runs itself (nil for --front).
func driveFront(ctx context.Context, env *environment, front, key string, shape loadShape, own *ownFront) error {
	workers, reqRate, duration, pollEvery := &shape.workers, &shape.rate, &shape.duration, &shape.pollEvery
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *workers, MaxConnsPerHost: *workers}, Timeout: 10 * time.Second}

	lim := rate.NewLimiter(rate.Limit(*reqRate), max(1, *workers/10))
	var requests, failures atomic.Int64
	var rttMu sync.Mutex
	var rtt []time.Duration
	rttBy := map[string][]time.Duration{}
	var idsMu sync.Mutex
	var ids []string
	var lost, answered atomic.Int64
	get := func(ctx context.Context, path string, q url.Values) (string, error) {
		if err := lim.Wait(ctx); err != nil {
			return "", err
		}
		start := time.Now()
		resp, err := hc.Get(front + path + "?" + q.Encode())
		if err != nil {
			failures.Add(1)
			return "", err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		d := time.Since(start)
		requests.Add(1)
		rttMu.Lock()
		rtt = append(rtt, d)
		route := strings.TrimPrefix(path, "/")
		rttBy[route] = append(rttBy[route], d)
		rttMu.Unlock()
		return string(body), nil
	}
	submitCtx, stopSubmits := context.WithTimeout(ctx, *duration)
	defer stopSubmits()
	pollCtx, stopPolls := context.WithTimeout(ctx, *duration+10*time.Second)
	defer stopPolls()
	began := time.Now()
	var wg sync.WaitGroup
	for range *workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			task := url.Values{"key": {key}, "method": {"turnstile"}, "sitekey": {"0x4AAAAAAA"}, "pageurl": {"https://load.example/"}}
			for submitCtx.Err() == nil {
				body, err := get(submitCtx, "/in.php", task)
				if err != nil {
					continue
				}
				id, ok := strings.CutPrefix(body, "OK|")
				if !ok {
					failures.Add(1)
					continue
				}
				idsMu.Lock()
				ids = append(ids, "load/"+id)
				idsMu.Unlock()
				for {
					select {
					case <-time.After(*pollEvery):
					case <-pollCtx.Done():
						lost.Add(1)
						return
					}
					body, err := get(pollCtx, "/res.php", url.Values{"key": {key}, "action": {"get"}, "id": {id}})
					if err != nil {
						continue
					}
					if body == "CAPCHA_NOT_READY" {
						continue
					}
					if !strings.HasPrefix(body, "OK|") {
						failures.Add(1)
					} else {
						answered.Add(1)
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	var missing, dup int
	if own != nil {
		own.stop()
		own.resultsMu.Lock()
		for _, id := range ids {
			switch own.results[id] {
			case 1:
			case 0:
				missing++
			default:
				dup++
			}
		}
		own.resultsMu.Unlock()
	} else {
		missing = len(ids) - int(answered.Load()) - int(lost.Load())
	}
	q := func(ds []time.Duration, p float64) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		slices.Sort(ds)
		return ds[min(len(ds)-1, int(p*float64(len(ds))))]
	}
	w := env.stdout
	fmt.Fprintf(w, "loadtest: %d clients, target %.0f req/s, %v submitting (%v total)\n", *workers, *reqRate, *duration, elapsed.Round(time.Millisecond))
	fmt.Fprintf(w, "requests: %d (%.0f/s), transport or protocol errors: %d\n", requests.Load(), float64(requests.Load())/elapsed.Seconds(), failures.Load())
	if own != nil {
		fmt.Fprintf(w, "tasks: %d submitted, %d with exactly one result, %d without, %d with more than one, %d abandoned by the client\n",
			len(ids), len(ids)-missing-dup, missing, dup, lost.Load())
		for _, route := range []string{"in.php", "res.php"} {
			ds := own.handler[route]
			fmt.Fprintf(w, "front handler %-8s n=%-7d p50=%-9v p99=%-9v max=%v\n", route, len(ds), q(ds, .5), q(ds, .99), q(ds, 1))
		}
	} else {
		fmt.Fprintf(w, "tasks: %d submitted, %d answered, %d abandoned by the client\n", len(ids), answered.Load(), lost.Load())
		for _, route := range []string{"in.php", "res.php"} {
			ds := rttBy[route]
			fmt.Fprintf(w, "round trip %-11s n=%-7d p50=%-9v p99=%-9v max=%v\n", route, len(ds), q(ds, .5), q(ds, .99), q(ds, 1))
		}
	}
	fmt.Fprintf(w, "round trip (client)    n=%-7d p50=%-9v p99=%-9v max=%v\n", len(rtt), q(rtt, .5), q(rtt, .99), q(rtt, 1))
	if failures.Load() > 0 || missing > 0 || dup > 0 || lost.Load() > 0 {
		return errors.New("load test found errors or lost tasks")
	}
	return nil
}
