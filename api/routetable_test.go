package api_test

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/agentd/agentd/api"
)

var updateRoutes = flag.Bool("update-routes", false, "rewrite docs/routes.md from api.RouteScopes")

const routesPath = "../docs/routes.md"

// routeTable is docs/routes.md: every route the router serves, by path,
// with the scope a credential needs for it, from api.RouteScopes (which
// the guard reads and TestEveryRouteHasAScope holds to the router).
func routeTable() string {
	var b strings.Builder
	b.WriteString(`# Routes and their scopes

Every route agentd serves, with the scope a credential needs for it
([security](security.md)): the guard reads the same table
(` + "`api.RouteScopes`" + `), and ` + "`go test ./api -run TestRouteTable -update-routes`" + `
writes this page from it; the test fails when they differ. ` + "`admin`" + ` holds every
scope; ` + "`public`" + ` needs no credential.

| route | scope |
| --- | --- |
`)
	routes := make([]string, 0, len(api.RouteScopes))
	for r := range api.RouteScopes {
		routes = append(routes, r)
	}
	slices.SortFunc(routes, func(a, b string) int {
		ma, pa, _ := strings.Cut(a, " ")
		mb, pb, _ := strings.Cut(b, " ")
		if c := strings.Compare(pa, pb); c != 0 {
			return c
		}
		return strings.Compare(ma, mb)
	})
	for _, r := range routes {
		fmt.Fprintf(&b, "| `%s` | `%s` |\n", r, api.RouteScopes[r])
	}
	return b.String()
}

// TestRouteTable: docs/routes.md is the table of api.RouteScopes.
func TestRouteTable(t *testing.T) {
	want := routeTable()
	if *updateRoutes {
		if err := os.WriteFile(routesPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(routesPath)
	if err != nil {
		t.Fatalf("%v: go test ./api -run TestRouteTable -update-routes writes it", err)
	}
	if string(got) != want {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(want, "\n")
		for i := range max(len(gl), len(wl)) {
			g, w := "(end)", "(end)"
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("docs/routes.md differs from api.RouteScopes at line %d (go test ./api -run TestRouteTable -update-routes):\nfile:   %s\ntable:  %s", i+1, g, w)
			}
		}
	}
}
