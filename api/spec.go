package api

import (
	_ "embed"
	"slices"
)

//go:embed openapi.yaml
var openAPI []byte

// OpenAPI returns a copy of openapi.yaml, the OpenAPI 3.1 description of the
// HTTP API and of the run events it streams, as the binary was built with it.
func OpenAPI() []byte { return slices.Clone(openAPI) }
