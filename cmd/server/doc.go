// Command server runs agentd: the HTTP API, the run engine and the event
// stream, against one PostgreSQL database. Configuration comes from
// environment variables, most with a flag twin (flags win); see
// docs/configuration.md, generated from config.go, for the list and the
// defaults. `server keys` manages API keys.
package main
