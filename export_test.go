package captchaq

// PingbackURLOf is the pingback URL the submits of the provider named name
// carry ("" for Config.Provider): what that provider is given, and all
// it is given.
func (q *Queue) PingbackURLOf(name string) string {
	if l := q.lanes.Named(name); l != nil {
		return q.inboxes[l.Index()].URL()
	}
	return ""
}
