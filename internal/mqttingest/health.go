package mqttingest

// Connected reports whether the subscription is connected to a broker now
// (for readiness). False before Start and after Stop.
func (in *Ingester) Connected() bool {
	return in.client != nil && in.client.IsConnectionOpen()
}
