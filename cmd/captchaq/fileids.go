package main

import (
	"encoding/json"
	"fmt"
)

// fileIDs are the ids of one task file, each with the line that has it
// first. An id names one task of a file, so batch writes one result line
// per id and enqueue publishes it once: a later line with the id is
// refused, whether its task is the same or not. It holds every id of the
// file: some 70 bytes an id of 16 characters.
type fileIDs map[string]int

// repeatedIDError refuses a line whose id an earlier line of its file has.
type repeatedIDError struct {
	ID    string
	First int // the line that has it first
}

func (e *repeatedIDError) Error() string {
	return fmt.Sprintf("id %q is already on line %d: give this task an id of its own, or drop the line", e.ID, e.First)
}

// check records id at line; the error is a *repeatedIDError when an
// earlier line has it. An empty id (a line with none) is not recorded.
func (f fileIDs) check(id string, line int) error {
	if id == "" {
		return nil
	}
	if first, ok := f[id]; ok {
		return &repeatedIDError{ID: id, First: first}
	}
	f[id] = line
	return nil
}

// lineID is the id a line gives, even when it is no valid task (an
// unknown field, a missing param): its "id" when the line is a JSON object
// with a string id, else "".
func lineID(raw []byte) string {
	var v struct {
		ID any `json:"id"`
	}
	if json.Unmarshal(raw, &v) == nil {
		if id, ok := v.ID.(string); ok {
			return id
		}
	}
	return ""
}
