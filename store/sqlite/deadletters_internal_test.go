package sqlite

import (
	"strings"
	"testing"

	"github.com/captchaq/captchaq"
)

// One tenant's dead letters are read through the tasks_dead_by_tenant
// index, not by reading every dead letter of every tenant.
func TestTenantDeadLettersUseTheIndex(t *testing.T) {
	t.Parallel()
	s := OpenTemp(t, Config{})
	defer s.Close()
	f := captchaq.DeadLetterFilter{All: true, Tenant: "qa"}
	args, err := filterArgs(f)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := s.db.QueryContext(t.Context(), `EXPLAIN QUERY PLAN `+selectRecord+` WHERE status = 'failed' AND `+deadLettersWhere(f)+` ORDER BY seq`, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if got := strings.Join(plan, "; "); !strings.Contains(got, "USING INDEX tasks_dead_by_tenant (tenant=?)") || strings.Contains(got, "TEMP B-TREE") {
		t.Errorf("plan of one tenant's dead letters: %s", got)
	}
}
