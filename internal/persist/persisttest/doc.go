// Package persisttest gives each test its own PostgreSQL database, cloned from
// a migrated template, and drops it when the test ends; WaitRun waits for a
// run to reach a state.
//
// The server is AGENTD_TEST_DATABASE_URL (default the local PostgreSQL).
//
// It is for tests only. It imports the domain (agentd), internal/persist
// and migrations, nothing else of agentd's.
package persisttest
