package postgres_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/pgtest"
	"github.com/captchaq/captchaq/store/postgres"
)

func open(t *testing.T, url string, cfg postgres.Config) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(t.Context(), url, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func exec(t *testing.T, url, sql string) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// Replicas starting at once on a new database: the advisory lock lets one
// create the schema, and every one opens it.
func TestConcurrentOpensMigrateOnce(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	const n = 6
	var wg sync.WaitGroup
	errs := make([]error, n)
	stores := make([]*postgres.Store, n)
	for i := range n {
		wg.Go(func() { stores[i], errs[i] = postgres.Open(t.Context(), url, postgres.Config{Owner: "gateway front"}) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Open %d: %v", i, errs[i])
		}
		defer stores[i].Close()
	}
	if _, _, err := stores[0].Enqueue(t.Context(), []captchaq.Task{{ID: "a", Method: "turnstile"}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if rec, err := stores[n-1].Get(t.Context(), "a"); err != nil || rec.Task.ID != "a" {
		t.Fatalf("Get from another opener = %+v, %v", rec, err)
	}
}

func TestNewerSchemaIsRefused(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	s := open(t, url, postgres.Config{})
	s.Close()
	exec(t, url, `UPDATE schema_version SET version = 99`)
	_, err := postgres.Open(t.Context(), url, postgres.Config{})
	var ne *postgres.NewerSchemaError
	if !errors.As(err, &ne) || ne.Version != 99 {
		t.Fatalf("Open of a newer schema: %v, want a NewerSchemaError for version 99", err)
	}
	if !strings.Contains(err.Error(), "upgrade this one") {
		t.Errorf("error %q does not say to upgrade", err)
	}
}

func TestForeignTasksTableIsRefused(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	exec(t, url, `CREATE TABLE tasks (x integer)`)
	_, err := postgres.Open(t.Context(), url, postgres.Config{})
	if err == nil || !strings.Contains(err.Error(), "not a captchaq store") {
		t.Fatalf("Open of a database with a foreign tasks table: %v", err)
	}
}

func TestOtherOwnerIsRefused(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	open(t, url, postgres.Config{Owner: "batch"})
	open(t, url, postgres.Config{Owner: "batch"})
	open(t, url, postgres.Config{})
	_, err := postgres.Open(t.Context(), url, postgres.Config{Owner: "serve"})
	var oe *postgres.OwnerError
	if !errors.Is(err, postgres.ErrOtherOwner) || !errors.As(err, &oe) || oe.Owner != "batch" || oe.Want != "serve" {
		t.Fatalf("Open by another owner: %v", err)
	}
}

// No error names the password, whatever fails.
func TestPasswordNeverInErrors(t *testing.T) {
	t.Parallel()
	const pw = "s3cretPW"
	for _, cs := range []string{
		"postgres://u:" + pw + "@127.0.0.1:1/db?connect_timeout=2", // nothing listens
		"postgres://u:" + pw + "@127.0.0.1:5432/db?sslmode=bogus",  // does not parse
		"host=127.0.0.1 port=1 user=u password=" + pw + " dbname=db connect_timeout=2",
		"postgres://u:" + pw + "@[::1:5432/db",
	} {
		_, err := postgres.Open(context.Background(), cs, postgres.Config{})
		if err == nil {
			t.Fatalf("Open(%q) succeeded", postgres.Redact(cs))
		}
		if strings.Contains(err.Error(), pw) {
			t.Errorf("Open error holds the password: %v", err)
		}
		if r := postgres.Redact(cs); strings.Contains(r, pw) {
			t.Errorf("Redact = %q, holds the password", r)
		}
	}
	if got := postgres.Redact("postgres://u:" + pw + "@db.example:6432/front?sslmode=require"); got != "postgres://u@db.example:6432/front" {
		t.Errorf("Redact = %q", got)
	}
}

// PostgreSQL text holds neither NUL bytes nor invalid UTF-8: such a task
// is refused as invalid, naming the field, and such an id is never found.
func TestUnstorableText(t *testing.T) {
	t.Parallel()
	s := open(t, pgtest.NewDatabase(t), postgres.Config{})
	ctx := t.Context()
	_, _, err := s.Enqueue(ctx, []captchaq.Task{{ID: "ok", Method: "turnstile"}, {ID: "a", Method: "turnstile", Tenant: "x\x00y"}}, time.Now())
	var te *captchaq.TaskError
	if !errors.As(err, &te) || te.Code != captchaq.CodeInvalidTask || !strings.Contains(te.Msg, "tenant") {
		t.Fatalf("Enqueue with a NUL in the tenant: %v, want an invalid task naming tenant", err)
	}
	if _, err := s.Get(ctx, "ok"); !errors.Is(err, captchaq.ErrNotFound) {
		t.Errorf("a refused batch stored its first task: Get = %v", err)
	}
	for _, id := range []string{"\x00readyz", "bad\xffutf8"} {
		if _, err := s.Get(ctx, id); !errors.Is(err, captchaq.ErrNotFound) {
			t.Errorf("Get(%q) = %v, want ErrNotFound", id, err)
		}
		if err := s.Checkpoint(ctx, id, "c", 1, time.Now()); !errors.Is(err, captchaq.ErrNotFound) {
			t.Errorf("Checkpoint(%q) = %v, want ErrNotFound", id, err)
		}
	}
	// A provider's answer with a NUL byte is stored, with U+FFFD for it.
	if _, _, err := s.Enqueue(ctx, []captchaq.Task{{ID: "t", Method: "turnstile"}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, captchaq.Result{ID: "t", Status: captchaq.StatusSolved, Token: "to\x00ken", FinishedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if rec, err := s.Get(ctx, "t"); err != nil || rec.Result.Token != "to\uFFFDken" {
		t.Errorf("Get(t) = %+v, %v; want token to\\uFFFDken", rec.Result, err)
	}
}

func TestPruneLoop(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	pruned := make(chan int, 10)
	s := open(t, url, postgres.Config{Retention: postgres.RetentionOff})
	ctx := t.Context()
	old := time.Now().Add(-2 * time.Hour)
	if _, _, err := s.Enqueue(ctx, []captchaq.Task{{ID: "old", Method: "turnstile"}, {ID: "new", Method: "turnstile"}}, old); err != nil {
		t.Fatal(err)
	}
	for id, at := range map[string]time.Time{"old": old, "new": time.Now()} {
		if err := s.Finish(ctx, captchaq.Result{ID: id, Status: captchaq.StatusSolved, FinishedAt: at}); err != nil {
			t.Fatal(err)
		}
	}
	s2 := open(t, url, postgres.PrunedHook(postgres.Config{Retention: time.Hour, PruneInterval: time.Hour}, func(n int, err error) {
		if err == nil {
			pruned <- n
		}
	}))
	if n := <-pruned; n != 1 {
		t.Fatalf("the prune at Open deleted %d tasks, want 1", n)
	}
	if _, err := s2.Get(ctx, "old"); !errors.Is(err, captchaq.ErrNotFound) {
		t.Errorf("old task after the prune: %v", err)
	}
	if _, err := s2.Get(ctx, "new"); err != nil {
		t.Errorf("new task after the prune: %v", err)
	}
}
