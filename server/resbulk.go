package server

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/captchaq/captchaq/provider/createtask"
)

// resBulk answers res.php's action=get&ids=…: each id's token or code
// joined by "|". With json=1, what a solved id's token is bound to is
// beside them as "bindings", by id, under a single poll's names
// ({"123":{"useragent":"…","cookies":…}}); plain text has no room for it.
func (s *frontSide) resBulk(r *http.Request, reply frontReply, cs *clientState, ids string) {
	// Counted before split: a split of a body of commas would take 16
	// bytes a comma.
	if n := strings.Count(ids, ",") + 1; n > BulkMaxIDs {
		reply.fail("ERROR_BAD_PARAMETERS", "ids: at most "+strconv.Itoa(BulkMaxIDs)+" ids a request, got "+strconv.Itoa(n))
		return
	}
	list := strings.Split(ids, ",")
	out := make([]string, len(list))
	bound := map[string]any{}
	for i, id := range list {
		rec, code := s.frontRecord(r, cs, id)
		if code == "" {
			token, raw, c, _ := answer(rec)
			if code = c; code == "" {
				out[i] = token
				if b := createtask.BindingsFor(rec.Result.Kind, raw, rec.Task.Params); !b.Empty() {
					m := map[string]any{}
					b.AddTo(m, "useragent")
					bound[id] = m
				}
				continue
			}
		}
		out[i] = pollCode(code)
	}
	if reply.json && len(bound) > 0 {
		reply.write(map[string]any{"status": 1, "request": strings.Join(out, "|"), "bindings": bound})
		return
	}
	reply.plain(1, strings.Join(out, "|"))
}
