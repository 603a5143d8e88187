package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd/internal/llm/fakellm"
)

func main() {
	if err := runBench(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "agentbench:", err)
		os.Exit(1)
	}
}

type options struct {
	admin       string
	what        []string
	reps        int
	duration    time.Duration
	quick       bool
	floorTPS    float64 // given with -floor: the floor is not measured
	streamRuns  int
	subscribers []int
	// pathInstances is how many agentd processes the path phase runs
	// against one database (AGENTBENCH_PATH_INSTANCES, default 1).
	pathInstances int
	out           io.Writer
	// cpu reads the CPU time of the machine's parts: the fake model's and
	// PostgreSQL's processes, when they are readable here.
	cpu machineCPU
	// remote is a running agentd to measure instead of one in this process
	// (the http phase only); nil: in-process.
	remote *remote
}

// remote is an agentd server run by someone else: its base URL, its
// database (for the counters and the guarantee checks), and its process, for
// its CPU time.
type remote struct {
	base, database string
	pid            int
}

// phases are the benchmarks, in the order each repetition runs them.
var phases = []string{"floor", "steps", "http", "stream", "compaction", "path", "dbos", "answers", "steer", "memory"}

func runBench(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("agentbench", flag.ContinueOnError)
	admin := fs.String("database-url", envOr("AGENTD_BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"),
		"PostgreSQL server; each benchmark creates and drops a database of its own")
	what := fs.String("what", strings.Join(phases, ","), "benchmarks to run, comma-separated: "+strings.Join(phases, ", "))
	reps := fs.Int("reps", 3, "repetitions; each runs every benchmark once, so that drift of the machine spreads across them")
	duration := fs.Duration("duration", 10*time.Second, "measuring time of each throughput benchmark")
	quick := fs.Bool("quick", false, "a short configuration (2s unless -duration is given, fewer clients and events) for a smoke run")
	floor := fs.Float64("floor", 0, "the floor in transactions/s, when known: it is then not measured")
	jsonPath := fs.String("json", "agentbench.json", "write the figures of every repetition to this file (empty: none)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the benchmarks to this file")
	memProfile := fs.String("memprofile", "", "write a profile of the benchmarks' allocations to this file at the end")
	serveFake := fs.Bool("serve-fake", false, "internal: serve the fake model on a loopback port and print its address")
	serveRelayOf := fs.String("serve-relay", "", "internal: relay the streams of the fake model at this base URL on a loopback port and print its address")
	url := fs.String("url", "", "measure the agentd server at this base URL instead of one in this process (http phase only; "+
		"the server must use the fake model); needs -url-database")
	urlDatabase := fs.String("url-database", "", "with -url: the server's database, for write transactions, WAL and the guarantee checks")
	pid := fs.Int("pid", 0, "with -url: the server's process id, for its CPU time (Linux)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *serveFake {
		return serveFakeModel(out)
	}
	if *serveRelayOf != "" {
		return serveRelay(out, *serveRelayOf)
	}
	o := options{admin: *admin, reps: *reps, duration: *duration, quick: *quick, floorTPS: *floor,
		streamRuns: 16, subscribers: []int{1, 100}, out: out}
	if o.quick {
		o.subscribers = []int{1, 10}
		if !flagGiven(fs, "duration") {
			o.duration = 2 * time.Second
		}
	}
	if *url != "" {
		if *urlDatabase == "" {
			return fmt.Errorf("-url needs -url-database: the server's database, for its counters and the guarantee checks")
		}
		o.remote = &remote{base: strings.TrimSuffix(*url, "/"), database: *urlDatabase, pid: *pid}
		if !flagGiven(fs, "what") {
			*what = "floor,http"
		}
	}
	if err := o.fromEnv(); err != nil {
		return err
	}
	if o.reps < 1 {
		return fmt.Errorf("-reps %d: at least 1", o.reps)
	}
	selected := strings.Split(*what, ",")
	for i, w := range selected {
		if selected[i] = strings.TrimSpace(w); !slices.Contains(phases, selected[i]) {
			return fmt.Errorf("-what: no benchmark %q", w)
		}
		if o.remote != nil && (selected[i] == "steps" || selected[i] == "stream") {
			return fmt.Errorf("-what %s: measured in this process only (with -url: floor, http)", selected[i])
		}
	}
	for _, p := range phases { // in their order, whatever the order given
		if slices.Contains(selected, p) {
			o.what = append(o.what, p)
		}
	}
	if *memProfile != "" {
		defer func() {
			if err := writeAllocs(*memProfile); err != nil {
				fmt.Fprintln(out, "memprofile:", err)
			}
		}()
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m, err := describeMachine(ctx, o.admin)
	if err != nil {
		return err
	}
	o.cpu.postmaster = findPostmaster(ctx, o.admin)
	fake, where := "", "agentd at "
	if o.remote != nil {
		where += o.remote.base
	} else {
		var stopFake func()
		if fake, o.cpu.fakePID, stopFake, err = startFake(); err != nil {
			return err
		}
		defer stopFake()
		where = "agentd in this process, the fake model in a child process at " + fake
	}
	fmt.Fprintf(out, "agentd benchmarks: %s of %s (%d CPUs, %s/%s, %s; PostgreSQL %s, synchronous_commit %s; %s)\n",
		plural(o.reps, "repetition"), strings.Join(o.what, ", "), m.CPUs, m.GOOS, m.GOARCH, m.Go, m.PostgreSQL, m.SynchronousCommit, where)
	start := time.Now()
	var all []metric
	for rep := 1; rep <= o.reps; rep++ {
		fmt.Fprintf(out, "\nrepetition %d of %d\n", rep, o.reps)
		ms, err := o.repetition(ctx, fake)
		if err != nil {
			return err
		}
		all = append(all, ms...)
	}
	results := summarize(all)
	fmt.Fprintln(out)
	printTable(out, results)
	cpuNote := "this process's (the load driver included, the fake model not)"
	if o.remote != nil {
		cpuNote = "the server process's, given with -pid (its built-in fake model included)"
	}
	fmt.Fprintf(out, "\nWrite transactions are the transaction ids the whole PostgreSQL cluster assigned, WAL its bytes written;\n"+
		"agentd CPU is %s. %s in %s.\n", cpuNote, plural(o.reps, "repetition"), time.Since(start).Round(time.Second))
	if *jsonPath != "" {
		if err := writeReport(*jsonPath, report{Date: start.UTC(), Machine: m, Options: o.report(), Metrics: results}); err != nil {
			return err
		}
		fmt.Fprintf(out, "Figures of every repetition in %s.\n", *jsonPath)
	}
	var violations float64
	for _, s := range results {
		if s.Name == violationsMetric {
			for _, v := range s.Values {
				violations += v
			}
		}
	}
	if violations > 0 {
		return fmt.Errorf("%.0f guarantee violations (see above)", violations)
	}
	return nil
}

// repetition runs each selected benchmark once.
func (o options) repetition(ctx context.Context, fake string) ([]metric, error) {
	var all []metric
	floorTPS := o.floorTPS
	for _, phase := range o.what {
		var ms []metric
		var err error
		switch phase {
		case "floor":
			if o.floorTPS > 0 {
				fmt.Fprintf(o.out, "  floor: %.0f transactions/s, as given\n", o.floorTPS)
				continue
			}
			if ms, err = benchFloor(ctx, o); err == nil {
				floorTPS = ms[0].Value
			}
		case "steps":
			if floorTPS == 0 { // steps alone: its ratio needs the floor all the same
				floorMS, err := benchFloor(ctx, o)
				if err != nil {
					return nil, fmt.Errorf("floor: %w", err)
				}
				all, floorTPS = append(all, floorMS...), floorMS[0].Value
			}
			ms, err = benchSteps(ctx, o, fake, floorTPS)
		case "http":
			ms, err = benchHTTP(ctx, o, fake)
		case "stream":
			ms, err = benchStream(ctx, o, fake)
		case "path":
			ms, err = benchPath(ctx, o)
		case "dbos":
			ms, err = benchDBOS(ctx, o, fake)
		case "answers":
			ms, err = benchAnswers(ctx, o, fake)
		case "steer":
			ms, err = benchSteer(ctx, o, fake)
		case "memory":
			ms, err = benchMemory(ctx, o, fake)
		case "compaction":
			turns := compactionTurns
			if o.quick {
				turns = 40
			}
			ms, err = benchCompaction(ctx, o, turns)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", phase, err)
		}
		all = append(all, ms...)
	}
	return all, nil
}

// fromEnv reads AGENTBENCH_STREAM_RUNS (streaming runs at once in the stream
// benchmark) and AGENTBENCH_SUBSCRIBERS (comma-separated subscribers per
// run, one measurement each).
func (o *options) fromEnv() error {
	if v := os.Getenv("AGENTBENCH_STREAM_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("AGENTBENCH_STREAM_RUNS=%q: want a positive number", v)
		}
		o.streamRuns = n
	}
	if v := os.Getenv("AGENTBENCH_PATH_INSTANCES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 8 {
			return fmt.Errorf("AGENTBENCH_PATH_INSTANCES=%q: want 1 to 8", v)
		}
		o.pathInstances = n
	}
	if v := os.Getenv("AGENTBENCH_SUBSCRIBERS"); v != "" {
		o.subscribers = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return fmt.Errorf("AGENTBENCH_SUBSCRIBERS=%q: want positive numbers, comma-separated", v)
			}
			o.subscribers = append(o.subscribers, n)
		}
	}
	return nil
}

func (o options) report() reportOptions {
	r := reportOptions{What: o.what, Reps: o.reps, Duration: o.duration.String(), Quick: o.quick, Floor: o.floorTPS,
		StreamRuns: o.streamRuns, Subscribers: o.subscribers}
	if o.remote != nil {
		r.URL = o.remote.base
	}
	return r
}

func flagGiven(fs *flag.FlagSet, name string) (given bool) {
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// describeMachine says what the figures come from.
func describeMachine(ctx context.Context, admin string) (machine, error) {
	m := machine{CPUs: runtime.NumCPU(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, Go: runtime.Version()}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return m, err
	}
	defer conn.Close(ctx)
	err = conn.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('synchronous_commit')`).
		Scan(&m.PostgreSQL, &m.SynchronousCommit)
	return m, err
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// serveFakeModel is the child process: it serves the fake model until its
// standard input closes (the parent exited or killed it).
func serveFakeModel(out io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: countReceived(fakellm.New(fakellm.WithMaxHistory(1))), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	fmt.Fprintf(out, "http://%s/v1\n", ln.Addr())
	io.Copy(io.Discard, os.Stdin)
	return srv.Close()
}

// receivedPath is where the fake model's child process answers what it has
// received (modelReceived), beside its model's routes.
const receivedPath = "/agentbench/received"

// modelReceived is what the fake model has received since it started: chat
// completion requests, and the bytes of their bodies.
type modelReceived struct {
	Requests int64 `json:"requests"`
	Bytes    int64 `json:"bytes"`
}

// countReceived counts the chat completion requests model receives and
// their bodies' bytes, and answers them at GET receivedPath.
func countReceived(model http.Handler) http.Handler {
	var requests, bytes atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == receivedPath {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(modelReceived{Requests: requests.Load(), Bytes: bytes.Load()})
			return
		}
		if strings.HasSuffix(r.URL.Path, "/chat/completions") {
			requests.Add(1)
			r.Body = countingBody{r.Body, &bytes}
		}
		model.ServeHTTP(w, r)
	})
}

// countingBody adds the bytes read from a request's body to n.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	k, err := b.ReadCloser.Read(p)
	b.n.Add(int64(k))
	return k, err
}

// fakeReceived reads what the fake model at base (its URL, ending in /v1)
// has received.
func fakeReceived(base string) (modelReceived, error) {
	var got modelReceived
	resp, err := client.Get(strings.TrimSuffix(base, "/v1") + receivedPath)
	if err != nil {
		return got, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return got, fmt.Errorf("GET %s: %d", receivedPath, resp.StatusCode)
	}
	err = json.NewDecoder(resp.Body).Decode(&got)
	return got, err
}

// startFake runs the fake model in a child process (this binary with
// -serve-fake) and returns its base URL and process id.
func startFake() (string, int, func(), error) {
	return startChild("fake model", "-serve-fake")
}

// startChild runs this binary with args in a child process, which serves
// until its standard input closes, and returns the address it prints first,
// its process id and the function that stops it; what names it in errors.
func startChild(what string, args ...string) (string, int, func(), error) {
	cmd := exec.Command(os.Args[0], args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", 0, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", 0, nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", 0, nil, err
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return "", 0, nil, fmt.Errorf("%s did not start: %w", what, err)
	}
	stop := func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	return strings.TrimSpace(line), cmd.Process.Pid, stop, nil
}

// writeAllocs writes the allocations profile (every allocation sampled
// since the start) to path.
func writeAllocs(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
