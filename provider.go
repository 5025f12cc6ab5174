package captchaq

import (
	"context"

	"github.com/captchaq/captchaq/provider"
)

// Provider is what the queue needs from a solving service. *provider.Client
// implements it.
type Provider interface {
	// Submit sends a validated task to in.php and returns the provider's id.
	// pingback, when not empty, asks the provider to call that URL when the
	// task is solved.
	Submit(ctx context.Context, t provider.Task, pingback string) (captchaID string, err error)
	// PollMany asks res.php for many ids at once (bulk ids= when the provider
	// supports it, one request per id otherwise) and returns one result per
	// id, in order. The error is for the request as a whole (network, bad
	// key); per-id failures are in PollResult.Err.
	PollMany(ctx context.Context, ids []string) ([]provider.PollResult, error)
}

// BalanceChecker is a Provider that can read the account's balance
// (getbalance). *provider.Client implements it. The queue uses it to tell an
// account error drawn by one task's content from a refused account: only a
// refused account pauses all sending.
type BalanceChecker interface {
	Balance(ctx context.Context) (float64, error)
}
