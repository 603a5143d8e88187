package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
)

// maxChatLine caps a line chat reads.
const maxChatLine = 1 << 20

// chat: agentctl chat [flags] [CONVERSATION].
func chat(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("chat", "[-agent NAME] [-model M] [-instructions I] [-now] [CONVERSATION]",
		"Talk with an agent in the terminal. Each line read from stdin is a message: the first\n"+
			"starts a run in a new conversation (or, with CONVERSATION, goes to that conversation),\n"+
			"and each line after it goes to the conversation, also while the agent answers: a run\n"+
			"in flight takes it at its next step (-now: at once, cutting the answer under way), and\n"+
			"once no run is in flight it starts the next one. The agent's answer is written as it\n"+
			"streams, with a line for each tool call and each message the run took. End with EOF\n"+
			"(Ctrl-D): chat ends once the run in flight ends, its exit status that of the last\n"+
			"run, as runs tail's (2 when the last message could not be sent).")
	agent := f.String("agent", "", "start the first run from the agent of this `name` (a CONVERSATION's next run takes its last run's)")
	model := f.String("model", "", "the first run's `model` (default: the server's)")
	instructions := f.String("instructions", "", "the first run's system `instructions`")
	now := f.Bool("now", false, "the messages a run in flight takes apply at once, cutting its answer under way")
	pos, code, ok := f.parse(args, 0, 1)
	if !ok {
		return code
	}
	s := &chatSession{seen: map[string]int64{}}
	// The renderer of the run followed and the main loop write to stdout
	// and stderr from two goroutines: one lock keeps their writes whole.
	var mu sync.Mutex
	ca := *a
	ca.stdout, ca.stderr = &lockedWriter{mu: &mu, w: a.stdout}, &lockedWriter{mu: &mu, w: a.stderr}
	s.a = &ca
	if *now {
		s.when = agentd.InputNow
	}
	s.first = client.CreateRun{Agent: *agent, Model: *model, Instructions: *instructions}
	if len(pos) == 1 {
		s.conv = pos[0]
		if code, ok := s.joinConversation(ctx); !ok {
			return code
		}
	}
	return s.loop(ctx)
}

// chatSession is one chat: the conversation, and the run it follows. The
// main loop (loop) owns its fields; the goroutine that follows a run
// hands what it saw back on its done channel.
type chatSession struct {
	a     *app
	conv  string           // "" until the first run started
	first client.CreateRun // the parameters of the conversation's first run
	when  agentd.InputWhen // of the messages after the first
	seen  map[string]int64 // the last event shown of each run followed
	cur   *following       // the run followed, nil when none
	queue []string         // the runs to follow once cur is done, in order
}

// following is a run followed by its own goroutine, which sends what it
// saw on done (buffered) when it stops: at the run's end, when the run
// waits for a decision, or when stop is called.
type following struct {
	runID string
	stop  context.CancelFunc
	done  chan followed
}

// followed is what the goroutine following a run saw.
type followed struct {
	runID  string
	last   int64            // the seq of the last event shown
	status agentd.RunStatus // at the end: the run's, or requires_action
	err    error
}

// joinConversation checks that the conversation exists, and follows its
// run in flight, when it has one, from its start.
func (s *chatSession) joinConversation(ctx context.Context) (int, bool) {
	if _, err := s.a.c.GetConversation(ctx, s.conv); err != nil {
		return s.a.fail(ctx, err), false
	}
	page, err := s.a.c.ListRuns(ctx, client.ListRuns{ConversationID: s.conv, Limit: 1})
	if err != nil {
		return s.a.fail(ctx, err), false
	}
	if len(page.Data) == 1 && !page.Data[0].Ended() {
		s.track(page.Data[0].ID)
	}
	return exitOK, true
}

// loop reads lines and sends them, and follows the runs they go to, until
// stdin ends and no run is in flight, or ctx ends. It returns chat's exit
// status.
func (s *chatSession) loop(ctx context.Context) int {
	quit := make(chan struct{})
	defer close(quit)
	in := readLines(s.a.stdin, quit)
	lines := in.lines
	code := exitOK
	for {
		if s.cur == nil && len(s.queue) > 0 {
			s.follow(ctx, s.queue[0])
			s.queue = s.queue[1:]
		}
		if s.cur == nil && lines == nil {
			return code
		}
		var done <-chan followed
		if s.cur != nil {
			done = s.cur.done
		}
		select {
		case <-ctx.Done():
			if s.cur != nil {
				s.cur.stop()
				<-s.cur.done
				s.cur = nil
			}
			fmt.Fprintln(s.a.stderr, "agentctl: interrupted")
			return exitInterrupted
		case line, ok := <-lines:
			if !ok {
				lines = nil // EOF: end once the runs in flight end
				if in.err != nil {
					fmt.Fprintf(s.a.stderr, "agentctl: read stdin: %v\n", in.err)
					code = exitError
				}
				continue
			}
			if strings.TrimSpace(line) == "" {
				continue
			}
			runID, err := s.send(ctx, line)
			if err != nil {
				if ctx.Err() == nil {
					fmt.Fprintf(s.a.stderr, "agentctl: %s\n", describeError(err))
					code = exitError
				}
				continue
			}
			s.track(runID)
		case res := <-done:
			s.cur = nil
			s.seen[res.runID] = res.last
			switch {
			case res.err != nil && ctx.Err() != nil:
			case res.err != nil:
				fmt.Fprintf(s.a.stderr, "agentctl: %s\n", describeError(res.err))
				code = exitError
			default:
				code = statusCode(res.status)
			}
		}
	}
}

// send sends line: as the first run of a new conversation, or to the
// conversation. It returns the run that took it.
func (s *chatSession) send(ctx context.Context, line string) (string, error) {
	if s.conv == "" {
		req := s.first
		req.Input, req.IfBusy = line, agentd.IfBusySteer
		r, err := s.a.c.CreateRun(ctx, req)
		if err != nil {
			return "", err
		}
		s.conv = r.ConversationID
		return r.ID, nil
	}
	sent, err := s.a.c.SendMessage(ctx, s.conv, client.SendMessage{Input: line, When: s.when, NewRun: &s.first})
	if err != nil {
		return "", err
	}
	return sent.Run.ID, nil
}

// track makes runID followed: at once when no run is, else once the runs
// before it are done. A run followed already is not followed again, but
// one followed until it waited for a decision is, from where it stopped,
// when a message goes to it.
func (s *chatSession) track(runID string) {
	if (s.cur != nil && s.cur.runID == runID) || slices.Contains(s.queue, runID) {
		return
	}
	s.queue = append(s.queue, runID)
}

// follow starts the goroutine that follows runID after the last event
// shown of it, writing its events as runs tail does.
func (s *chatSession) follow(ctx context.Context, runID string) {
	after := s.seen[runID]
	if after == 0 && !s.a.json {
		fmt.Fprintf(s.a.stdout, "%s run %s (conversation %s)\n", markInfo, runID, s.conv)
	}
	fctx, stop := context.WithCancel(ctx)
	f := &following{runID: runID, stop: stop, done: make(chan followed, 1)}
	s.cur = f
	a := s.a
	go func() {
		defer stop()
		out := newRenderer(a.stdout, runID)
		show := a.show(out)
		last := after
		status, err := a.follow(fctx, runID, after, func(ev client.Event, waits bool) {
			last = ev.Seq
			show(ev, waits)
		})
		out.endLine()
		f.done <- followed{runID: runID, last: last, status: status, err: err}
	}()
}

// lineFeed is the lines read from a reader: err is why reading stopped
// other than at EOF, set before lines is closed.
type lineFeed struct {
	lines chan string
	err   error
}

// readLines reads r's lines in a goroutine of its own, which ends at EOF,
// at an error, or once quit is closed and the read under way returns (a
// read of a terminal cannot be cut short: then it ends with the process).
func readLines(r io.Reader, quit <-chan struct{}) *lineFeed {
	l := &lineFeed{lines: make(chan string)}
	go func() {
		defer close(l.lines)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 0, 64<<10), maxChatLine)
		for sc.Scan() {
			select {
			case l.lines <- sc.Text():
			case <-quit:
				return
			}
		}
		l.err = sc.Err()
	}()
	return l
}

// lockedWriter is a writer that several goroutines write to at once, each
// Write whole.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}
