// Command server runs agentd: the HTTP API, the run engine and the event
// stream, against one PostgreSQL database. Configuration comes from
// environment variables, each with a flag twin (flags win); see config.go and
// README.md for the list and the defaults.
package main
