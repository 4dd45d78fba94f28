package buckets

// EvictChecks returns how many series-days eviction has looked at.
func (p *Planner) EvictChecks() uint64 { return p.checked }
