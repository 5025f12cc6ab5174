package captchaq

// ThreadPool shares one plan's threads among processes that use the same
// key (see amqp.Worker, whose pool is a queue of thread tokens on the
// broker). With a pool, the queue submits only while its tasks at the
// provider are fewer than the threads the pool holds for it, and tells the
// pool its demand after every dispatch round. The AIMD window on "no free
// thread" still applies on top, as the guard against other users of the
// key.
type ThreadPool interface {
	// Want reports demand: busy threads in use (tasks at the provider or
	// being submitted) and waiting tasks that could use a thread now. It
	// must not block. Until the next Want, the pool must not give back
	// threads below what Held last returned: the queue may have started
	// submits on them.
	Want(busy, waiting int)
	// Held is how many threads this process may use now.
	Held() int
	// Ready receives when Held grows.
	Ready() <-chan struct{}
}
