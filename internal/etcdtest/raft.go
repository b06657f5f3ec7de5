package etcdtest

// Committed is the raft log's committed index on the leader (the highest
// any running member has): every proposal etcd agreed on, writes and
// lease grants and revokes alike, and the writes whose compares failed.
// The difference of two readings is the proposals between them, the
// figure KV revisions miss.
func (c *Cluster) Committed() uint64 {
	var most uint64
	for _, m := range c.Members {
		m.mu.Lock()
		if m.etcd != nil {
			most = max(most, m.etcd.Server.CommittedIndex())
		}
		m.mu.Unlock()
	}
	return most
}
