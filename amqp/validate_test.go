package amqp

import (
	"fmt"
	"strings"
	"testing"

	"github.com/captchaq/captchaq"
	"github.com/captchaq/captchaq/internal/tasktest"
)

// TestValidateTableGateway: the gateway accepts and refuses the shared
// table's tasks with the table's codes, before anything is published.
func TestValidateTableGateway(t *testing.T) {
	t.Parallel()
	r := newGatewayRig(t, testConfig(t))
	g, _ := r.gateway("validate", nil, nil)
	ctx := testCtx(t)
	valid := 0
	for i, c := range tasktest.Cases {
		err := g.Submit(ctx, captchaq.Task{ID: fmt.Sprintf("case-%d", i), Method: c.Method, Params: c.Params})
		if c.Code == "" {
			valid++
			if err != nil {
				t.Errorf("%s: Submit = %v, want accepted", c.Name, err)
			}
			continue
		}
		if err == nil || captchaq.RefusalCode(err) != c.Code || !strings.Contains(err.Error(), c.Field) {
			t.Errorf("%s: Submit = %v; want code %s naming %q", c.Name, err, c.Code, c.Field)
		}
	}
	if n := depth(t, ctx, r.c, r.c.Names().Tasks); n != valid {
		t.Errorf("task queue holds %d, want the %d valid tasks", n, valid)
	}
}
