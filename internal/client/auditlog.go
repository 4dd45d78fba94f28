package client

import (
	"context"
	"net/url"
)

// AuditLog sends GET /v1/audit/<endpoint>?params (checkpoint, checkpoints,
// proof, consistency, verify) and decodes the JSON answer into out.
func (c *Client) AuditLog(ctx context.Context, endpoint string, params url.Values, out any) error {
	return c.get(ctx, "/v1/audit/"+endpoint, params, out)
}
