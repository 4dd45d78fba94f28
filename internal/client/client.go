// Package client is a typed HTTP client for Sluice's read API:
// GET /v1/readings, /v1/audit and /v1/partitions.
//
// It turns responses into model values and non-2xx answers into *APIError,
// retries answers that say the gateway is busy (503 or 429) a bounded number
// of times, honouring Retry-After, and follows next_cursor on request. It
// never retries anything else: a read that failed for another reason is
// reported as it is.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/wire"
)

// TimeFormat is how the client writes times into query parameters and how
// the read API writes them: RFC 3339, UTC, milliseconds.
const TimeFormat = wire.TimeFormat

// MaxLimit is the largest page the read API serves.
const MaxLimit = 10_000

// maxBody bounds a response body: a full page of 10000 wide readings is far
// below it; anything larger is a misbehaving server or proxy.
const maxBody = 256 << 20

// maxErrorBody bounds how much of an error body is read.
const maxErrorBody = 64 << 10

// APIError is a non-2xx answer from the read API. Message is the "error"
// field of the JSON body, or the body's text if it was not JSON.
type APIError struct {
	Status  int
	Message string
	// RetryAfter is the wait the server asked for with Retry-After, or 0.
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s (HTTP %d)", e.Message, e.Status)
}

// Busy reports whether the server refused for load and the request may be
// retried later.
func (e *APIError) Busy() bool {
	return e.Status == http.StatusServiceUnavailable || e.Status == http.StatusTooManyRequests
}

// Retry says how requests answered with "busy" (503 or 429) are retried.
type Retry struct {
	// Attempts is the number of tries per request, including the first;
	// less than 1 counts as 1.
	Attempts int
	// MinWait and MaxWait bound one wait: the client waits for Retry-After
	// (MinWait when the server sent none), but no less than MinWait and no
	// more than MaxWait.
	MinWait, MaxWait time.Duration
	// Notify, if set, is called before each wait (e.g. to tell the user).
	Notify func(err *APIError, wait time.Duration)
}

// DefaultRetry is three tries, waiting one to ten seconds between them.
func DefaultRetry() Retry { return Retry{Attempts: 3, MinWait: time.Second, MaxWait: 10 * time.Second} }

// Client talks to one gateway as one tenant. It is safe for concurrent use
// once Retry is no longer being changed.
type Client struct {
	base  *url.URL
	token string
	hc    *http.Client

	// Retry is DefaultRetry unless changed after NewClient.
	Retry Retry
}

// NewClient returns a client for the gateway at baseURL (http or https,
// optionally with a path prefix) that authenticates with token. A nil
// httpClient means a new http.Client without a timeout: bound requests with
// their context or with httpClient.Timeout.
func NewClient(baseURL, token string, httpClient *http.Client) (*Client, error) {
	if !strings.Contains(baseURL, "://") {
		return nil, fmt.Errorf("base URL %q: want http://host[:port] or https://host[:port]", baseURL)
	}
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("parse base URL %q: %w", baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("base URL %q: want http://host[:port] or https://host[:port]", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("base URL %q: must not have a query or fragment", baseURL)
	}
	if httpClient == nil {
		httpClient = &http.Client{}
	}
	return &Client{base: u, token: token, hc: httpClient, Retry: DefaultRetry()}, nil
}

// get sends GET path?params and decodes a 2xx JSON body into out, retrying
// busy answers as c.Retry says.
func (c *Client) get(ctx context.Context, path string, params url.Values, out any) error {
	attempts := max(c.Retry.Attempts, 1)
	for attempt := 1; ; attempt++ {
		err := c.getOnce(ctx, path, params, out)
		var apiErr *APIError
		if attempt >= attempts || !errors.As(err, &apiErr) || !apiErr.Busy() {
			return err
		}
		wait := min(max(apiErr.RetryAfter, c.Retry.MinWait), c.Retry.MaxWait)
		if c.Retry.Notify != nil {
			c.Retry.Notify(apiErr, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("get %s: %w (while waiting to retry: %w)", path, ctx.Err(), apiErr)
		case <-t.C:
		}
	}
}

func (c *Client) getOnce(ctx context.Context, path string, params url.Values, out any) error {
	u := c.base.JoinPath(path)
	u.RawQuery = params.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("get %s: %w", path, err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "sluice-query")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		// *url.Error repeats the whole URL, query included; name the
		// endpoint once instead.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		endpoint := *u
		endpoint.RawQuery = ""
		return fmt.Errorf("get %s: %w", endpoint.String(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return decodeError(resp)
	}
	dec := json.NewDecoder(io.LimitReader(resp.Body, maxBody))
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("decode %s response: %w", path, err)
	}
	return nil
}

// decodeError reads a non-2xx answer into an *APIError.
func decodeError(resp *http.Response) *APIError {
	e := &APIError{Status: resp.StatusCode, RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"))}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var eb struct {
		Error string `json:"error"`
	}
	switch {
	case json.Unmarshal(body, &eb) == nil && eb.Error != "":
		e.Message = eb.Error
	case len(strings.TrimSpace(string(body))) > 0:
		e.Message = oneLine(string(body), 200)
	default:
		e.Message = strings.ToLower(http.StatusText(resp.StatusCode))
		if e.Message == "" {
			e.Message = "unexpected status"
		}
	}
	return e
}

// parseRetryAfter reads delta-seconds or an HTTP date; 0 if absent or bad.
func parseRetryAfter(s string) time.Duration {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0
	}
	if n, err := strconv.Atoi(s); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(s); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// oneLine collapses whitespace in s and cuts it to at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
