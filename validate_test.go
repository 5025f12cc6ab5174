package captchaq_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/tasktest"
	"github.com/captchaq/captchaq/provider"
)

// TestValidateTable: Task.Validate, and through it Queue.Submit, accept and
// refuse the shared table's tasks with its codes.
func TestValidateTable(t *testing.T) {
	t.Parallel()
	q, err := captchaq.New(captchaq.Config{Provider: refusingProvider{}, Store: captchaq.NewMemoryStore(captchaq.MemoryStoreConfig{})})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for _, c := range tasktest.Cases {
		task := captchaq.Task{ID: "v-" + strings.ReplaceAll(c.Name, " ", "-"), Method: c.Method, Params: c.Params}
		err := task.Validate()
		if got := code(err); got != c.Code || c.Code != "" && !strings.Contains(err.Error(), c.Field) {
			t.Errorf("%s: Validate = %v; want code %q naming %q", c.Name, err, c.Code, c.Field)
		}
		if c.Code == "" {
			continue
		}
		_, err = q.Submit(context.Background(), task)
		if got := code(err); got != c.Code {
			t.Errorf("%s: Submit = %v; want code %q", c.Name, err, c.Code)
		}
	}
}

func code(err error) string {
	if err == nil {
		return ""
	}
	return captchaq.RefusalCode(err)
}

// refusingProvider is never reached: the table's tasks that Submit is given
// are refused before sending.
type refusingProvider struct{}

func (refusingProvider) Submit(context.Context, provider.Task, string) (string, error) {
	return "", errors.New("not expected: an invalid task reached the provider")
}

func (refusingProvider) PollMany(context.Context, []string) ([]provider.PollResult, error) {
	return nil, errors.New("not expected")
}
