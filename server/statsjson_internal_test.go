package server

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/captchaq/captchaq"
)

// /v1/stats lists each provider's refusals of types, with their times in
// RFC 3339, and leaves the field out when there are none.
func TestStatsProviderRefused(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 18, 0, 0, 0, time.UTC)
	m := captchaq.Metrics{Providers: []captchaq.ProviderMetrics{
		{Name: "main", Refused: []captchaq.TypeRefusal{{Method: "hcaptcha", Code: "ERROR_METHOD_CALL", Since: t0, Until: t0.Add(time.Hour)}}},
		{Name: "backup"},
	}}
	var got struct {
		Providers []map[string]json.RawMessage `json:"providers"`
	}
	b, _ := json.Marshal(statsMetrics(m))
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := `[{"method":"hcaptcha","code":"ERROR_METHOD_CALL","since":"2026-12-07T18:00:00Z","until":"2026-12-07T19:00:00Z"}]`
	if s := string(got.Providers[0]["refused"]); s != want {
		t.Errorf("main's refused = %s, want %s", s, want)
	}
	if r, ok := got.Providers[1]["refused"]; ok {
		t.Errorf("backup's refused = %s, want absent", r)
	}
}
