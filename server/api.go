package server

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/apiform"
	"github.com/captchaq/captchaq/provider"
)

// apiSide serves the /v1 API's tasks, events, stats and dead letters.
type apiSide struct {
	deps
}

// apiError is the JSON API's error body. Field names the input at fault.
type apiError struct {
	Error string `json:"error"`
	// Code is a machine-readable reason where one applies: INVALID_TASK or
	// UNSUPPORTED_TYPE for a refused task, ID_CONFLICT.
	Code  string `json:"code,omitempty"`
	Field string `json:"field,omitempty"`
	Index *int   `json:"index,omitempty"`

	status int // the HTTP status when not 400
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func apiFail(w http.ResponseWriter, status int, field, msg string) {
	writeJSON(w, status, apiError{Error: msg, Field: field})
}

func retryAfter(w http.ResponseWriter, d time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int((d+time.Second-1)/time.Second))))
}

// parseAPITasks reads one task object or an array, filling ids and the
// tenant, and checks every task before any is submitted.
func (s *apiSide) parseAPITasks(ctx context.Context, body []byte, cs *clientState) ([]captchaq.ValidTask, *apiError) {
	raws, aerr := s.apiTaskObjects(body)
	if aerr != nil {
		return nil, aerr
	}
	tasks := make([]captchaq.ValidTask, 0, len(raws))
	seen := map[string]int{}
	for i, raw := range raws {
		i := i
		bad := func(field, msg string) *apiError {
			e := &apiError{Error: msg, Field: field}
			if len(raws) > 1 {
				e.Index = &i
			}
			return e
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			return nil, bad("", "task: not a JSON object: "+err.Error())
		}
		if obj == nil {
			return nil, bad("", "task: null is not a task; send a JSON object such as {\"method\":\"turnstile\",\"params\":{...}}")
		}
		if _, ok := obj["id"]; !ok {
			id, _, err := s.ids.freshID(ctx, cs.Name)
			if errors.Is(err, errNoFreshID) {
				return nil, &apiError{Error: "id: none given and " + err.Error(), status: http.StatusServiceUnavailable}
			}
			if err != nil {
				s.log.Error("store read failed", "err", err)
				return nil, &apiError{Error: "the store could not be read; try again shortly", status: http.StatusServiceUnavailable}
			}
			obj["id"], _ = json.Marshal(id)
		}
		delete(obj, "tenant") // the client is the tenant
		fixed, _ := json.Marshal(obj)
		t, err := captchaq.ParseTask(fixed)
		if err != nil {
			e := bad(fieldOf(err), err.Error())
			e.Code = captchaq.RefusalCode(err)
			return nil, e
		}
		if t.ID == "" {
			// The store's id would not be empty ("<client>/"): the
			// service's ids say so here.
			e := bad("id", "id: required (a unique key for the task)")
			e.Code = captchaq.CodeInvalidTask
			return nil, e
		}
		if strings.Contains(t.ID, "/") || len(t.ID) > 200 {
			return nil, bad("id", "id: must be at most 200 characters without '/'")
		}
		if t.Pingback != "" {
			if reason := provider.CheckCallbackURL(t.Pingback); reason != "" {
				return nil, bad("pingback", "pingback: "+reason)
			}
		}
		local := t.ID
		t.ID, t.Tenant = storeID(cs.Name, local), cs.Name
		cs.clamp(&t, s.cfg.MaxAttempts)
		v, err := s.backend.Check(t)
		if err != nil {
			msg := err.Error()
			var te *captchaq.TaskError
			if errors.As(err, &te) {
				msg = te.Msg
			}
			e := bad(fieldOf(err), msg)
			e.Code = captchaq.RefusalCode(err)
			return nil, e
		}
		if j, dup := seen[local]; dup {
			return nil, bad("id", fmt.Sprintf("id: %q appears twice (tasks %d and %d)", local, j, i))
		}
		seen[local] = i
		tasks = append(tasks, v)
	}
	return tasks, nil
}

// apiTaskObjects splits a body of tasks into its task objects, unread: one
// object, or an array of at most MaxTasksPerRequest.
func (s *apiSide) apiTaskObjects(body []byte) ([]json.RawMessage, *apiError) {
	body = bytes.TrimSpace(body)
	var raws []json.RawMessage
	switch {
	case len(body) == 0:
		return nil, &apiError{Error: "empty body: send one task object or an array of them"}
	case body[0] == '[':
		if !json.Valid(body) {
			err := json.Unmarshal(body, &raws) // for the error's text
			return nil, &apiError{Error: "body: not a JSON array of tasks: " + err.Error()}
		}
		if n := arrayLen(body); n > s.cfg.MaxTasksPerRequest {
			return nil, &apiError{Error: fmt.Sprintf("body: %d tasks in one request; the server takes at most %d: split them", n, s.cfg.MaxTasksPerRequest), status: http.StatusRequestEntityTooLarge}
		}
		if aerr := s.scanAPIBody(body); aerr != nil {
			return nil, aerr
		}
		if err := json.Unmarshal(body, &raws); err != nil {
			return nil, &apiError{Error: "body: not a JSON array of tasks: " + err.Error()}
		}
		if len(raws) == 0 {
			return nil, &apiError{Error: "body: the array is empty"}
		}
	default:
		if aerr := s.scanAPIBody(body); aerr != nil {
			return nil, aerr
		}
		raws = []json.RawMessage{body}
	}
	return raws, nil
}

// scanAPIBody refuses a body of tasks whose decoding would cost tens of
// times its size (many tiny fields) or that holds a field longer than an
// image the provider takes, before anything of it is decoded.
func (s *apiSide) scanAPIBody(body []byte) *apiError {
	err := apiform.ScanJSON(body, apiFieldsPerTask*s.cfg.MaxTasksPerRequest, maxFieldBytes)
	if err == nil {
		return nil
	}
	status := http.StatusBadRequest
	if errors.Is(err, apiform.ErrFieldTooLong) {
		status = http.StatusRequestEntityTooLarge
	}
	_, text := formErrorCode(s.cfg, err)
	return &apiError{Error: "body: " + text, status: status}
}

// apiFieldsPerTask bounds the JSON values of one task of POST /v1/tasks
// (its fields, params and their values, well past any real task's):
// MaxTasksPerRequest times it bound a body's.
const apiFieldsPerTask = 64

// arrayLen counts the elements of a valid JSON array without decoding
// them: a body of many tiny elements is refused for its count before it
// costs a slice of them.
func arrayLen(b []byte) int {
	if rest := bytes.TrimSpace(b[1:]); len(rest) > 0 && rest[0] == ']' {
		return 0
	}
	n, depth, inString, escaped := 1, 0, false, false
	for _, c := range b {
		switch {
		case inString && escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case inString:
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
		case c == ']' || c == '}':
			depth--
		case c == ',' && depth == 1:
			n++
		}
	}
	return n
}

func (s *apiSide) handleCreate(w http.ResponseWriter, r *http.Request, cs *clientState) {
	body, ok := s.createBody(w, r, cs)
	if !ok {
		return
	}
	tasks, aerr := s.parseAPITasks(r.Context(), body, cs)
	if aerr != nil {
		writeJSON(w, cmp.Or(aerr.status, http.StatusBadRequest), aerr)
		return
	}
	// A known id is answered as it is, without counting against limits.
	views := make([]TaskView, len(tasks))
	fresh, aerr := s.knownTasks(r.Context(), tasks, views, cs)
	if aerr != nil {
		writeJSON(w, aerr.status, aerr)
		return
	}
	freshIDs := make([]string, len(fresh))
	for j, i := range fresh {
		freshIDs[j] = tasks[i].ID()
	}
	if len(fresh) > 0 {
		if le := s.clients.reserve(r.Context(), cs, freshIDs); le != nil {
			retryAfter(w, le.retry)
			apiFail(w, http.StatusTooManyRequests, "", le.msg)
			return
		}
	}
	// The new tasks go to the queue together: one Store call, not one each.
	batch := make([]captchaq.ValidTask, len(fresh))
	for j, i := range fresh {
		batch[j] = tasks[i]
	}
	errs := s.submitBatch(r.Context(), batch)
	accepted, failed, failedAt := 0, error(nil), 0
	for j, err := range errs {
		if err != nil {
			s.clients.release(cs, freshIDs[j])
			if failed == nil {
				failed, failedAt = err, fresh[j]
			}
			continue
		}
		accepted++
	}
	cs.mu.Lock()
	cs.accepted += int64(accepted)
	cs.mu.Unlock()
	if failed != nil {
		createFailed(w, failed, failedAt, len(tasks) > 1, accepted, len(fresh))
		return
	}
	for _, i := range fresh {
		t := tasks[i].Task()
		_, local := splitID(t.ID)
		views[i] = TaskView{ID: local, Client: cs.Name, Status: captchaq.StatusQueued, Method: t.Method, Priority: cmpOr(t.Priority, captchaq.PriorityDefault)}
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"tasks": views})
}

// createBody reads a create's body after the cheap refusals: a client at
// its max_inflight gets nothing parsed, and bodies being read are bounded
// overall. false: the answer is written.
func (s *apiSide) createBody(w http.ResponseWriter, r *http.Request, cs *clientState) ([]byte, bool) {
	if cs.MaxInflight > 0 {
		cs.mu.Lock()
		n := len(cs.inflight)
		cs.mu.Unlock()
		if n >= cs.MaxInflight {
			retryAfter(w, time.Second)
			apiFail(w, http.StatusTooManyRequests, "", fmt.Sprintf("client %q has %d unfinished tasks; its max_inflight is %d", cs.Name, n, cs.MaxInflight))
			return nil, false
		}
	}
	body, err := s.readClientBody(w, r, cs)
	if err != nil {
		if errors.Is(err, errBodiesBusy) {
			bodyRefused(w, err)
			return nil, false
		}
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			apiFail(w, http.StatusRequestEntityTooLarge, "", fmt.Sprintf("body over the server's limit of %d bytes", mbe.Limit))
			return nil, false
		}
		apiFail(w, http.StatusBadRequest, "", "body could not be read: "+err.Error())
		return nil, false
	}
	return body, true
}

// knownTasks fills views for the tasks whose id the backend knows and
// returns the indexes of the others. A known id with another task is
// refused before anything is accepted; a solved one whose token expired
// is solved again (it is among the others).
func (s *apiSide) knownTasks(ctx context.Context, tasks []captchaq.ValidTask, views []TaskView, cs *clientState) (fresh []int, _ *apiError) {
	for i, v := range tasks {
		t := v.Task()
		rec, err := s.backend.Get(ctx, t.ID)
		if err == nil {
			known, cerr := rec.Known(t, time.Now())
			if cerr != nil {
				_, local := splitID(t.ID)
				e := &apiError{Error: strings.Replace(cerr.Error(), strconv.Quote(t.ID), strconv.Quote(local), 1), Field: "id", Code: captchaq.CodeIDConflict, status: http.StatusConflict}
				if len(tasks) > 1 {
					e.Index = &i
				}
				return nil, e
			}
			if known != captchaq.KnownExpired {
				views[i] = view(rec, cs)
				views[i].Existed = true
				continue
			}
		}
		fresh = append(fresh, i)
	}
	return fresh, nil
}

// createFailed answers a create whose batch the queue refused in part:
// failed is the first refusal, of task failedAt (named when many), after
// accepted of the fresh new tasks.
func createFailed(w http.ResponseWriter, failed error, failedAt int, many bool, accepted, fresh int) {
	if errors.Is(failed, captchaq.ErrIDConflict) || errors.Is(failed, captchaq.ErrInvalidTask) {
		e := apiError{Error: failed.Error(), Field: "id", Code: captchaq.CodeIDConflict}
		status := http.StatusConflict
		if !errors.Is(failed, captchaq.ErrIDConflict) {
			e = apiError{Error: failed.Error(), Field: fieldOf(failed)}
			status = http.StatusBadRequest
		}
		if many {
			e.Index = &failedAt
		}
		writeJSON(w, status, e)
		return
	}
	retryAfter(w, time.Second)
	msg := "the queue is full: try again shortly"
	if errors.Is(failed, captchaq.ErrClosed) {
		msg = "the server is shutting down"
	}
	if accepted > 0 {
		msg += fmt.Sprintf(" (%d of the %d new tasks were accepted)", accepted, fresh)
	}
	apiFail(w, http.StatusServiceUnavailable, "", msg)
}

func cmpOr(a, b int) int {
	if a == 0 {
		return b
	}
	return a
}

// readClientBody reads the body of cs's API request, at most
// Config.MaxBodyBytes, metered against cs's share of the bodies being read
// (see bodyBudget).
func (s *deps) readClientBody(w http.ResponseWriter, r *http.Request, cs *clientState) ([]byte, error) {
	m, release := s.clientBody(r, cs)
	defer release()
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	var buf bytes.Buffer
	_, err := buf.ReadFrom(r.Body)
	if m.err != nil {
		err = m.err
		cutShort(w, r)
	}
	return buf.Bytes(), err
}

func (s *apiSide) handleGet(w http.ResponseWriter, r *http.Request, cs *clientState) {
	id := visibleID(cs, r.PathValue("id"))
	var wait time.Duration
	if ws := r.URL.Query().Get("wait"); ws != "" {
		d, err := time.ParseDuration(ws)
		if err != nil || d < 0 {
			apiFail(w, http.StatusBadRequest, "wait", `wait: use a duration such as "30s" (at most 60s)`)
			return
		}
		wait = min(d, WaitMaxDefault)
	}
	var sub *subscription
	if wait > 0 {
		if !slot(w, &cs.waits, s.waits, s.cfg.MaxWaitsPerClient, s.cfg.MaxWaits, "long polls (?wait=)") {
			return
		}
		defer func() { cs.waits.give(1); s.waits.give(1) }()
		// Subscribe before reading, so a result between the read and the
		// wait is not missed.
		sub = s.events.subscribeID(id)
		defer s.events.unsubscribe(sub)
	}
	rec, ok := s.getVisible(w, r, cs, id)
	if !ok {
		return
	}
	if sub != nil && !rec.Status.Final() {
		http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wait + 10*time.Second))
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-sub.ch:
		case <-t.C:
		case <-r.Context().Done():
			return
		}
		if rec, ok = s.getVisible(w, r, cs, id); !ok {
			return
		}
	}
	writeJSON(w, http.StatusOK, view(rec, cs))
}

func (s *apiSide) getVisible(w http.ResponseWriter, r *http.Request, cs *clientState, id string) (captchaq.Record, bool) {
	rec, err := s.backend.Get(r.Context(), id)
	if err == nil && (cs.Admin || rec.Task.Tenant == cs.Name) {
		return rec, true
	}
	if err == nil || errors.Is(err, captchaq.ErrNotFound) {
		apiFail(w, http.StatusNotFound, "id", "no task with id "+strconv.Quote(r.PathValue("id")))
		return rec, false
	}
	s.log.Error("store read failed", "err", err)
	apiFail(w, http.StatusServiceUnavailable, "", "the store could not be read; try again shortly")
	return rec, false
}

func (s *apiSide) handleCancel(w http.ResponseWriter, r *http.Request, cs *clientState) {
	id := visibleID(cs, r.PathValue("id"))
	if _, ok := s.getVisible(w, r, cs, id); !ok {
		return
	}
	err := s.backend.Cancel(r.Context(), id)
	switch {
	case err == nil:
	case errors.Is(err, captchaq.ErrInFlight), errors.Is(err, captchaq.ErrFinal):
		apiFail(w, http.StatusConflict, "id", err.Error())
		return
	case errors.Is(err, captchaq.ErrNotFound):
		apiFail(w, http.StatusNotFound, "id", "no task with id "+strconv.Quote(r.PathValue("id")))
		return
	default:
		// The store's or the broker's own words name files and hosts:
		// the operator's log has them, the client a plain answer.
		s.log.Error("cancel failed", "id", id, "err", err)
		apiFail(w, http.StatusInternalServerError, "", "the task could not be canceled now: try again shortly")
		return
	}
	rec, ok := s.getVisible(w, r, cs, id)
	if ok {
		writeJSON(w, http.StatusOK, view(rec, cs))
	}
}

// ClientStats are one client's counts.
type ClientStats struct {
	Name     string `json:"name"`
	Weight   int    `json:"weight"`
	Inflight int    `json:"inflight"`
	Accepted int64  `json:"accepted"`
	Solved   int64  `json:"solved"`
	Failed   int64  `json:"failed"`
	// Reports are what came of the client's reports.
	Reports ReportCounts `json:"reports"`
}

// Stats is GET /v1/stats.
type Stats struct {
	// Metrics is the whole queue's: admin clients only.
	Metrics     *StatsMetrics `json:"metrics,omitempty"`
	Clients     []ClientStats `json:"clients"`
	DeadLetters int           `json:"dead_letters"`
	Ready       bool          `json:"ready"`
	// Broker is the messages ready in each broker queue, for a Backend
	// that is a QueueDepther (a gateway); absent otherwise.
	Broker map[string]int `json:"broker,omitempty"`
}

func (s *apiSide) handleStats(w http.ResponseWriter, r *http.Request, cs *clientState) {
	st := Stats{Ready: s.ready(r.Context()) == nil}
	if cs.Admin {
		// Whole-queue numbers are the operator's; a client sees its own.
		st.Metrics = statsMetrics(s.backend.Metrics())
		withReports(st.Metrics, s.reports.providers())
	}
	if qd, ok := s.backend.(QueueDepther); ok && cs.Admin {
		// Best effort: a broker that does not answer soon leaves it out.
		ctx, cancel := context.WithTimeout(r.Context(), depthWait)
		st.Broker, _ = qd.QueueDepths(ctx)
		cancel()
	}
	for _, c := range s.cfg.Clients {
		if !cs.Admin && c.Name != cs.Name {
			continue
		}
		x := s.clients.byName[c.Name]
		x.mu.Lock()
		st.Clients = append(st.Clients, ClientStats{Name: c.Name, Weight: max(c.Weight, 1), Inflight: len(x.inflight), Accepted: x.accepted, Solved: x.solved, Failed: x.failed, Reports: s.reports.client(c.Name)})
		x.mu.Unlock()
	}
	n := 0
	err := s.deadLetters(r.Context(), cs, func(captchaq.Record) error { n++; return nil })
	if err != nil {
		apiFail(w, http.StatusServiceUnavailable, "", "the store could not be read; try again shortly")
		return
	}
	st.DeadLetters = n
	writeJSON(w, http.StatusOK, st)
}
