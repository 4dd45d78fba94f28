package decode

// CheckID returns why b may not be a device id, stream or metric name of at
// most maxLen bytes, or "" when it may: 1..maxLen bytes of A-Z a-z 0-9 _ . : -.
// Other transports (line protocol) validate their ids with it, so that every
// way in accepts exactly the same ids.
func CheckID(b []byte, maxLen int) string { return checkID(b, maxLen) }

// IDCharset describes the characters CheckID allows, for messages and docs.
const IDCharset = idCharset

// MaxEpochMillis is the last timestamp the decoders accept,
// 9999-12-31T23:59:59.999Z.
const MaxEpochMillis = maxEpochMillis
