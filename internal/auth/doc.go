// Package auth says who a request comes from: its credential (an agentd API
// key, or a JWT of the operator's OpenID Connect provider) gives the tenant
// it acts for, the actor to record, and the scopes it holds. The API's one
// guard middleware asks an Authenticator, then checks the scope its route
// table names (api/routes.go). Watch lets a request that lasts (an event
// stream) end when its credential stops holding: a key revoked or deleted,
// a token expired.
//
// It imports the domain (agentd), nothing
// else of agentd's.
package auth
