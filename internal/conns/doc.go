// Package conns bounds what a client can hold of an HTTP server before it
// is answered, so that slow or unauthenticated clients cannot take the
// connections that authenticated ones need.
//
// Two parts, used together by cmd/server:
//
//   - BodyDeadline gives every request that has a body a read deadline, set
//     as the handler is entered: the body must arrive within the timeout
//     whether or not the handler reads it. net/http reads an unread body
//     (up to 256 KiB) before it writes the answer, so without a deadline a
//     request refused at once (404, 405, 415, 401, a GET with a body) held
//     its connection for as long as its client kept trickling bytes. A
//     request without a body gets no deadline: net/http's background read
//     of the connection, running while the handler does, would fail at the
//     deadline and cancel the request's context, ending an event stream
//     that had been served for the timeout. A request whose body was read
//     to its end loses the deadline by itself (net/http clears it as it
//     starts that background read), so streaming handlers need do nothing.
//   - Listener caps the connections of a net.Listener, as
//     golang.org/x/net/netutil.LimitListener does, and gives connections on
//     which no request has authenticated yet a smaller budget of their own.
//     A request that authenticates (Authenticated, called with its context)
//     moves its connection out of that budget for the rest of its life.
//     When a new connection finds the unauthenticated budget full, or the
//     whole cap taken while some connections are unauthenticated, the
//     oldest unauthenticated connection that may go is closed to make
//     room: one that has had its grace (a second by default) to send a
//     request, and none of whose requests is being served (Serving marks
//     them). So a client that sends its request, credential and all, at
//     once is never cut while it is checked, and one that holds a
//     connection without a request makes way. When no connection may go,
//     the new one is answered 503 with Retry-After and closed, never
//     dropped unanswered. Only when every connection has authenticated
//     does Accept wait, past the cap, for one to close.
//
// It imports nothing of agentd's.
package conns
