// Command dbos is a peer benchmark for agentd: it measures how many durable
// 3-step workflows per second DBOS Transact Go completes on a PostgreSQL
// server, so that agentd's benchmark tool can set its own 3-step run (model,
// tool, model) beside DBOS's on the same machine.
//
// It creates a fresh database of its own on the server, uses it as DBOS's
// system database, runs -clients goroutines that each start a workflow and
// wait for its result in a loop, and drops the database at the end. What it
// prints on stdout is one JSON line with the result (after, with -marks, a
// line as its measured window starts and one as it ends).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"
)

const (
	dbosModule = "github.com/dbos-inc/dbos-transact-golang"
	// dbosVersionFallback is reported when the build carries no module
	// information (it matches go.mod).
	dbosVersionFallback = "v1.9.0"
	appName             = "agentbench_dbos"
	// maxPrintedErrors bounds how many workflow errors go to stderr.
	maxPrintedErrors = 5
)

// config is what one benchmark run needs.
type config struct {
	// DatabaseURL is a PostgreSQL server URL; the database it names is used
	// only to create and drop the benchmark's own database.
	DatabaseURL string
	// DBName is the database the run creates and drops; empty means
	// agentbench_dbos_<pid>.
	DBName   string
	Clients  int
	Duration time.Duration
	Warmup   time.Duration
	// ModelURL, when set, is an OpenAI-compatible endpoint (agentd's fake
	// model) that the first and the last step call, as agentd's run calls
	// its model twice: the comparison then gives DBOS the same model work.
	ModelURL string
	// HTTP puts the workflow behind an HTTP server of the program's own
	// (POST /workflows, answered with the workflow's result), which the
	// clients call over loopback, as agentd's clients call its API.
	HTTP bool
	// Marks, when set, is told as the measured window starts and ends
	// (-marks prints a line for each on stdout, before the result's), so
	// that a caller can read the machine's CPU over the window alone.
	Marks func(mark string)
}

// result is the JSON line the program prints.
type result struct {
	Workflows     int64   `json:"workflows"`
	Failed        int64   `json:"failed"`
	Seconds       float64 `json:"seconds"`
	WorkflowsPerS float64 `json:"workflows_per_s"`
	CPUSeconds    float64 `json:"cpu_seconds"`
	Clients       int     `json:"clients"`
	ModelCalls    bool    `json:"model_calls"` // steps 1 and 3 called the model (-model-url)
	HTTP          bool    `json:"http"`        // the clients called the workflow over HTTP (-http)
	DBOSVersion   string  `json:"dbos_version"`
}

func main() {
	var cfg config
	flag.StringVar(&cfg.DatabaseURL, "database-url", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
		"PostgreSQL server URL (the benchmark creates and drops a database of its own on it)")
	flag.IntVar(&cfg.Clients, "clients", 16, "concurrent clients, each running one workflow at a time")
	flag.DurationVar(&cfg.Duration, "duration", 10*time.Second, "measured window")
	flag.DurationVar(&cfg.Warmup, "warmup", 2*time.Second, "warm-up before the measured window (workflows run but are not counted)")
	flag.StringVar(&cfg.ModelURL, "model-url", "", "an OpenAI-compatible base URL (agentd's fake model) that steps 1 and 3 call, as agentd's run calls its model")
	flag.BoolVar(&cfg.HTTP, "http", false, "serve the workflow over HTTP on loopback (POST /workflows) and have the clients call it")
	marks := flag.Bool("marks", false, `print {"mark":"start"} and {"mark":"end"} on stdout as the measured window starts and ends`)
	flag.Parse()
	if *marks {
		cfg.Marks = func(mark string) { fmt.Printf("{\"mark\":%q}\n", mark) }
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	res, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/dbos:", err)
		os.Exit(1)
	}
	line, err := json.Marshal(res)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/dbos:", err)
		os.Exit(1)
	}
	fmt.Println(string(line))
}

// run creates the benchmark database, runs the benchmark on it and drops it.
func run(ctx context.Context, cfg config) (res result, err error) {
	if cfg.Clients < 1 {
		return result{}, errors.New("clients must be at least 1")
	}
	if cfg.Duration <= 0 {
		return result{}, errors.New("duration must be positive")
	}
	if cfg.Warmup < 0 {
		return result{}, errors.New("warmup cannot be negative")
	}
	if cfg.DBName == "" {
		cfg.DBName = fmt.Sprintf("agentbench_dbos_%d", os.Getpid())
	}
	sysURL, err := withDatabase(cfg.DatabaseURL, cfg.DBName)
	if err != nil {
		return result{}, err
	}

	if err := createDatabase(ctx, cfg.DatabaseURL, cfg.DBName); err != nil {
		return result{}, err
	}
	defer func() {
		// Drop even when ctx is cancelled (e.g. on SIGINT).
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if derr := dropDatabase(dctx, cfg.DatabaseURL, cfg.DBName); derr != nil {
			err = errors.Join(err, derr)
		}
	}()

	return bench(ctx, cfg, sysURL)
}

// bench launches DBOS on sysURL, drives the workflows and shuts DBOS down.
func bench(ctx context.Context, cfg config, sysURL string) (result, error) {
	// DBOS's own logger defaults to info on stdout; send it to stderr at warn.
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// The DBOS context is not derived from ctx's cancellation: a signal stops
	// the clients between workflows, and Shutdown drains the ones in flight.
	dctx, err := dbos.NewContext(context.WithoutCancel(ctx), dbos.Config{
		AppName:     appName,
		DatabaseURL: sysURL,
		Logger:      logger,
	})
	if err != nil {
		return result{}, fmt.Errorf("dbos.NewContext: %w", err)
	}
	defer func() {
		if err := dbos.Shutdown(dctx, 10*time.Second); err != nil {
			fmt.Fprintln(os.Stderr, "bench/dbos: dbos.Shutdown:", err)
		}
	}()
	model = cfg.ModelURL
	dbos.RegisterWorkflow(dctx, threeSteps)
	if err := dbos.Launch(dctx); err != nil {
		return result{}, fmt.Errorf("dbos.Launch: %w", err)
	}

	one := func(input string) error { return runOne(dctx, input) }
	if cfg.HTTP {
		base, stopServer, err := serveWorkflows(dctx)
		if err != nil {
			return result{}, err
		}
		defer stopServer() // after the clients stopped
		one = func(input string) error { return callWorkflow(base, input) }
	}
	d := startDrivers(cfg.Clients, one)
	// Whatever happens below, the clients are stopped and waited for before
	// DBOS is shut down (deferred calls run last-in first-out).
	defer d.stop()

	if err := sleep(ctx, cfg.Warmup); err != nil {
		return result{}, err
	}
	mark := func(m string) {
		if cfg.Marks != nil {
			cfg.Marks(m)
		}
	}
	mark("start")
	cpu0 := cpuTime()
	t0 := time.Now()
	d.measuring.Store(true)
	if err := sleep(ctx, cfg.Duration); err != nil {
		return result{}, err
	}
	d.measuring.Store(false)
	elapsed := time.Since(t0)
	cpu1 := cpuTime()
	mark("end")
	d.stop()

	n := d.completed.Load()
	return result{
		Workflows:     n,
		Failed:        d.failed.Load(),
		Seconds:       elapsed.Seconds(),
		WorkflowsPerS: float64(n) / elapsed.Seconds(),
		CPUSeconds:    (cpu1 - cpu0).Seconds(),
		Clients:       cfg.Clients,
		ModelCalls:    cfg.ModelURL != "",
		HTTP:          cfg.HTTP,
		DBOSVersion:   dbosVersion(),
	}, nil
}

// drivers are the clients: each starts a workflow and waits for its
// result, in a loop, until stopped; completions count while measuring is
// set, failures always.
type drivers struct {
	measuring                atomic.Bool
	completed, failed, shown atomic.Int64
	cancel                   context.CancelFunc
	wg                       sync.WaitGroup
}

func startDrivers(clients int, one func(input string) error) *drivers {
	d := &drivers{}
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	for c := range clients {
		d.wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				err := one(fmt.Sprintf("c%d-%d", c, i))
				switch {
				case err != nil:
					d.failed.Add(1)
					if d.shown.Add(1) <= maxPrintedErrors {
						fmt.Fprintf(os.Stderr, "bench/dbos: client %d: %v\n", c, err)
					}
				case d.measuring.Load():
					d.completed.Add(1)
				}
			}
		})
	}
	return d
}

// stop stops the clients between workflows and waits for them; safe to
// call twice.
func (d *drivers) stop() {
	d.cancel()
	d.wg.Wait()
}

// serveWorkflows serves POST /workflows on a loopback port: the body's
// input runs as a workflow, and the answer is its result. stop closes the
// server.
func serveWorkflows(dctx dbos.Context) (base string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /workflows", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Input string `json:"input"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		h, err := dbos.RunWorkflow(dctx, threeSteps, in.Input)
		var out string
		if err == nil {
			out, err = h.GetResult()
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"output": out})
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Close() }, nil
}

// callWorkflow runs one workflow through the server at base.
func callWorkflow(base, input string) error {
	body, err := json.Marshal(map[string]string{"input": input})
	if err != nil {
		return err
	}
	resp, err := client.Post(base+"/workflows", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var answer struct {
		Output string `json:"output"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST /workflows: %s (%v)", resp.Status, err)
	}
	if want := expected(input); answer.Output != want {
		return fmt.Errorf("workflow returned %q, want %q", answer.Output, want)
	}
	return nil
}

// runOne starts one workflow and waits for its result.
func runOne(dctx dbos.Context, input string) error {
	h, err := dbos.RunWorkflow(dctx, threeSteps, input)
	if err != nil {
		return fmt.Errorf("RunWorkflow: %w", err)
	}
	out, err := h.GetResult()
	if err != nil {
		return fmt.Errorf("GetResult: %w", err)
	}
	if want := expected(input); out != want {
		return fmt.Errorf("workflow returned %q, want %q", out, want)
	}
	return nil
}

// expected is what threeSteps returns for input.
func expected(input string) string { return "hello " + input + ":" + strconv.Itoa(len("hello "+input)) }

// model is config.ModelURL, which the workflow's steps read (the workflow
// is registered once, before any runs); client keeps a connection per
// client, to the model and to the workflows' server.
var (
	model  string
	client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
)

// threeSteps is the durable workflow: three checkpointed steps in order,
// mirroring agentd's model, tool, model run; with a model URL the first
// and the last step call it, else they do no work.
func threeSteps(ctx dbos.Context, input string) (string, error) {
	s1, err := dbos.RunAsStep(ctx, func(ctx context.Context) (string, error) {
		return "hello " + input, askModel(ctx, "/call calculator {\"expression\":\"6*7\"}")
	}, dbos.WithStepName("step1"))
	if err != nil {
		return "", err
	}
	s2, err := dbos.RunAsStep(ctx, func(context.Context) (string, error) {
		return strconv.Itoa(len(s1)), nil
	}, dbos.WithStepName("step2"))
	if err != nil {
		return "", err
	}
	return dbos.RunAsStep(ctx, func(ctx context.Context) (string, error) {
		return s1 + ":" + s2, askModel(ctx, "/say The answer is 42.")
	}, dbos.WithStepName("step3"))
}

// askModel makes one chat completion of the model (none without one) and
// reads its answer whole.
func askModel(ctx context.Context, prompt string) error {
	if model == "" {
		return nil
	}
	body, err := json.Marshal(map[string]any{"model": "fake", "messages": []map[string]string{{"role": "user", "content": prompt}}})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(model, "/")+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var answer struct {
		Choices []json.RawMessage `json:"choices"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil || resp.StatusCode != http.StatusOK || len(answer.Choices) == 0 {
		return fmt.Errorf("model: %s, %d choices (%v)", resp.Status, len(answer.Choices), err)
	}
	return nil
}

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// cpuTime is this process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// dbosVersion is the DBOS module version linked into the binary.
func dbosVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == dbosModule {
				if m.Replace != nil {
					m = m.Replace
				}
				if m.Version != "" && m.Version != "(devel)" {
					return m.Version
				}
			}
		}
	}
	return dbosVersionFallback
}

// withDatabase returns the server URL with its database replaced by name.
func withDatabase(serverURL, name string) (string, error) {
	u, err := url.Parse(serverURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("database-url must be a postgres:// URL, got %q", serverURL)
	}
	u.Path = "/" + name
	u.RawPath = ""
	return u.String(), nil
}

func createDatabase(ctx context.Context, serverURL, name string) error {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", redact(serverURL), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

func dropDatabase(ctx context.Context, serverURL, name string) error {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", redact(serverURL), err)
	}
	defer conn.Close(ctx)
	// FORCE ends any connection DBOS may have left behind.
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// redact hides a password in a URL for error messages.
func redact(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return "database-url"
}
