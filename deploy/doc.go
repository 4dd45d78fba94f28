// Package deploy has no code. Its tests check the deployment that
// docker-compose.yml and the files under deploy/ describe, without a Docker
// engine: the compose file against the Compose specification's schema and
// against the gateway's own configuration loader, its shape (two gateways,
// a migration first, a volume each, healthchecks, pinned images), the
// Prometheus configuration and the dashboards' PromQL with promtool, the
// metrics the dashboards and alerts use against a gateway started as the
// compose file starts it, and the rollup dashboard's SQL against a real
// ClickHouse.
package deploy
