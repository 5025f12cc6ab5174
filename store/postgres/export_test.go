package postgres

// PrunedHook returns c with its test hook told of each automatic prune.
func PrunedHook(c Config, fn func(n int, err error)) Config {
	c.pruned = fn
	return c
}
