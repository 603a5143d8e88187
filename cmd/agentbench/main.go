package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"agentd/internal/llm/fakellm"
)

func main() {
	if err := runBench(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "agentbench:", err)
		os.Exit(1)
	}
}

type options struct {
	admin    string
	what     map[string]bool
	duration time.Duration
	quick    bool
	floorTPS float64
	out      io.Writer
}

func runBench(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("agentbench", flag.ContinueOnError)
	admin := fs.String("database-url", envOr("AGENTD_BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"),
		"PostgreSQL server; each benchmark creates and drops a database of its own")
	what := fs.String("what", "floor,steps,http,stream", "benchmarks to run, comma-separated: floor, steps, http, stream")
	duration := fs.Duration("duration", 10*time.Second, "measuring time of each throughput benchmark")
	quick := fs.Bool("quick", false, "a short configuration (2s, fewer clients and events) for a smoke run")
	floor := fs.Float64("floor", 0, "the floor in transactions/s, when known: steps then skips measuring it")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the benchmarks to this file")
	serveFake := fs.Bool("serve-fake", false, "internal: serve the fake model on a loopback port and print its address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *serveFake {
		return serveFakeModel(out)
	}
	o := options{admin: *admin, what: map[string]bool{}, duration: *duration, quick: *quick, floorTPS: *floor, out: out}
	if o.quick {
		o.duration = 2 * time.Second
	}
	for _, w := range strings.Split(*what, ",") {
		o.what[strings.TrimSpace(w)] = true
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
	fake, stopFake, err := startFake()
	if err != nil {
		return err
	}
	defer stopFake()
	fmt.Fprintf(out, "agentd benchmarks (%d CPUs; fake model in a child process at %s)\n\n", numCPU(), fake)
	floorTPS := o.floorTPS
	if o.what["floor"] || (o.what["steps"] && o.floorTPS == 0) {
		if floorTPS, err = benchFloor(ctx, o); err != nil {
			return fmt.Errorf("floor: %w", err)
		}
	}
	if o.what["steps"] {
		if err := benchSteps(ctx, o, fake, floorTPS); err != nil {
			return fmt.Errorf("steps: %w", err)
		}
	}
	if o.what["http"] {
		if err := benchHTTP(ctx, o, fake); err != nil {
			return fmt.Errorf("http: %w", err)
		}
	}
	if o.what["stream"] {
		if err := benchStream(ctx, o, fake); err != nil {
			return fmt.Errorf("stream: %w", err)
		}
	}
	return nil
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
	srv := &http.Server{Handler: fakellm.New(fakellm.WithMaxHistory(1)), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	fmt.Fprintf(out, "http://%s/v1\n", ln.Addr())
	io.Copy(io.Discard, os.Stdin)
	return srv.Close()
}

// startFake runs the fake model in a child process (this binary with
// -serve-fake) and returns its base URL.
func startFake() (string, func(), error) {
	cmd := exec.Command(os.Args[0], "-serve-fake")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return "", nil, fmt.Errorf("fake model did not start: %w", err)
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
	return strings.TrimSpace(line), stop, nil
}
