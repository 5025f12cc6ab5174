package sqlstore

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/provider"
)

// TokenColumns are the columns of the reservoir_tokens table that hold a
// token's Result, in the order of TokenArgs and ScanToken: all of it but
// its status (solved), Error and ErrorCode (a solved result has none)
// and Reservoir (a refill's result has none; a draw names it). The
// table's key is (reservoir, id).
const TokenColumns = `id, method, kind, token, answer, attempts, captcha_id, solve_seconds,
	expires_at, provider, price, abandoned, accepted_at, submitted_at, finished_at`

// Encoder writes what a store's dialect holds its own way, the reverse
// of a Decoder: a time (nil for the zero time), Result.Abandoned (nil
// for none) and a text (what PostgreSQL cannot hold replaced).
type Encoder struct {
	Time      func(time.Time) any
	Abandoned func([]string) (any, error)
	Text      func(string) string
}

// TokenArgs are the arguments of both stores' insert of reservoir name's
// token r: name, then the TokenColumns. A result Result.CheckStockable
// refuses fails with its error, as it is.
func TokenArgs(name string, r captchaq.Result, e Encoder) ([]any, error) {
	if err := r.CheckStockable(); err != nil {
		return nil, err
	}
	var answer any
	if len(r.Answer) > 0 {
		answer = e.Text(string(r.Answer))
	}
	abandoned, err := e.Abandoned(r.Abandoned)
	if err != nil {
		return nil, err
	}
	return []any{
		e.Text(name), e.Text(r.ID), e.Text(r.Method), e.Text(string(r.Kind)), e.Text(r.Token), answer, r.Attempts,
		e.Text(r.CaptchaID), r.SolveSeconds, e.Time(r.ExpiresAt), e.Text(r.Provider), r.Price, abandoned,
		e.Time(r.AcceptedAt), e.Time(r.SubmittedAt), e.Time(r.FinishedAt),
	}, nil
}

// ScanToken reads the TokenColumns of one row into the solved Result
// they hold. Times come back in UTC.
func ScanToken[T, A any](sc Scanner, d Decoder[T, A]) (captchaq.Result, error) {
	r := captchaq.Result{Status: captchaq.StatusSolved}
	var (
		kind                          string
		answer                        *string
		abandoned                     A
		expires, accepted, sub, finAt T
	)
	err := sc.Scan(&r.ID, &r.Method, &kind, &r.Token, &answer, &r.Attempts, &r.CaptchaID, &r.SolveSeconds,
		&expires, &r.Provider, &r.Price, &abandoned, &accepted, &sub, &finAt)
	if err != nil {
		return captchaq.Result{}, err
	}
	r.Kind = provider.Kind(kind)
	if answer != nil {
		r.Answer = json.RawMessage(*answer)
	}
	if r.Abandoned, err = d.Abandoned(abandoned); err != nil {
		return captchaq.Result{}, fmt.Errorf("reservoir token %q: %w", r.ID, err)
	}
	for _, tm := range []struct {
		dst *time.Time
		src T
	}{{&r.ExpiresAt, expires}, {&r.AcceptedAt, accepted}, {&r.SubmittedAt, sub}, {&r.FinishedAt, finAt}} {
		at, err := d.Time(tm.src)
		if err != nil {
			return captchaq.Result{}, fmt.Errorf("reservoir token %q: %w", r.ID, err)
		}
		*tm.dst = at.UTC()
	}
	return r, nil
}

// CountTokens is the query of both stores' TokenCounts.
const CountTokens = `SELECT reservoir, count(*) FROM reservoir_tokens GROUP BY reservoir`

// TokenCounts is both stores' TokenCounts: it reads the rows of
// CountTokens that a store's handle answered (rows, or err) into a map
// and closes them. An error goes through wrap.
func TokenCounts(rows Rows, err error, wrap func(error) error) (map[string]int, error) {
	if err != nil {
		return nil, wrap(err)
	}
	defer closeRows(rows)
	counts := map[string]int{}
	for rows.Next() {
		var name string
		var n int
		if err := rows.Scan(&name, &n); err != nil {
			return nil, wrap(err)
		}
		counts[name] = n
	}
	return counts, wrap(rows.Err())
}

// closeRows closes pgx.Rows (Close()) and *sql.Rows (Close() error).
func closeRows(rows Rows) {
	switch r := rows.(type) {
	case interface{ Close() }:
		r.Close()
	case interface{ Close() error }:
		_ = r.Close()
	}
}
