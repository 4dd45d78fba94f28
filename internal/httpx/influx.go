package httpx

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
)

// InfluxError writes an error as the InfluxDB API of v2 (true) or 1.x
// (false) does, for the InfluxDB-compatible endpoints: {"code": "...",
// "message": "..."} with an X-Platform-Error-Code header, or {"error":
// "..."}. retryAfter, when positive, is sent as Retry-After in whole
// seconds, rounded up. The request id is in the X-Request-Id header (set
// by package reqid) only: Influx clients show the message as it is.
func InfluxError(w http.ResponseWriter, v2 bool, status int, retryAfterSeconds float64, msg string) {
	if retryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(retryAfterSeconds))))
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	code := influxCode(status)
	if v2 {
		w.Header().Set("X-Platform-Error-Code", code)
	}
	w.WriteHeader(status)
	var v any = struct {
		Error string `json:"error"`
	}{msg}
	if v2 {
		v = struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}{code, msg}
	}
	_ = json.NewEncoder(w).Encode(v) // an error means the client went away
}

// influxCode is the InfluxDB 2.x error code of a status.
func influxCode(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity, http.StatusConflict:
		return "invalid"
	case http.StatusUnauthorized:
		return "unauthorized"
	case http.StatusRequestEntityTooLarge:
		return "request too large"
	case http.StatusTooManyRequests:
		return "too many requests"
	case http.StatusServiceUnavailable:
		return "unavailable"
	case http.StatusNotFound:
		return "not found"
	}
	return "internal error"
}
