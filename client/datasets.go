package client

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/agentd/agentd"
)

// Dataset is a version of a dataset of evaluation cases as the server
// shows it (docs/evals.md).
type Dataset = agentd.DatasetView

// Case is a case of a dataset, whole, as the server shows it; sent back
// as it is (AddCasesJSON), it is kept as it is.
type Case = agentd.CaseView

// Check and Stub are a case's checks and stubs.
type (
	Check = agentd.Check
	Stub  = agentd.Stub
)

// NewCase is a case as a client sends it: an input (Input, or
// InputMessages), or a recorded run to start from (FromRun, and AtStep:
// nil for the run's last completed step, 0 for its input), which the
// server captures, with checks, stubs and metadata. Zero fields are left
// out.
type NewCase struct {
	ID            string            `json:"id,omitempty"` // "": the server makes one
	Name          string            `json:"name,omitempty"`
	Input         string            `json:"-"` // one user message
	InputMessages []InputMessage    `json:"-"` // in place of Input: messages with parts
	Variables     map[string]string `json:"variables,omitempty"`
	User          string            `json:"user,omitempty"`
	FromRun       string            `json:"from_run,omitempty"`
	AtStep        *int              `json:"at_step,omitempty"`
	Checks        []Check           `json:"checks,omitempty"`
	Stubs         []Stub            `json:"stubs,omitempty"`
	Metadata      json.RawMessage   `json:"metadata,omitempty"`
}

// MarshalJSON writes the case with its input as POST /runs takes it.
func (c NewCase) MarshalJSON() ([]byte, error) {
	type fields NewCase
	out := struct {
		fields
		Input any `json:"input,omitempty"`
	}{fields: fields(c)}
	switch {
	case c.InputMessages != nil:
		out.Input = c.InputMessages
	case c.Input != "":
		out.Input = c.Input
	}
	return json.Marshal(out)
}

// NewDataset is what POST /datasets sends.
type NewDataset struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
	Cases       []NewCase       `json:"cases,omitempty"`
}

// Datasets are the tenant's datasets (the /datasets routes):
// Client.Datasets returns them.
type Datasets struct{ c *Client }

// Datasets returns the client's door to the tenant's datasets.
func (c *Client) Datasets() *Datasets { return &Datasets{c: c} }

func datasetPath(name string) string { return "/datasets/" + esc(name) }

// Create makes a dataset at version 1 with its cases (POST /datasets).
func (d *Datasets) Create(ctx context.Context, nd NewDataset) (*Dataset, error) {
	return d.send(ctx, http.MethodPost, "/datasets", nd)
}

// CreateJSON makes a dataset from the body of POST /datasets as JSON.
func (d *Datasets) CreateJSON(ctx context.Context, body json.RawMessage) (*Dataset, error) {
	return d.send(ctx, http.MethodPost, "/datasets", body)
}

// AddCases adds cases to a dataset, in its next version, which it returns
// (POST /datasets/{name}/cases).
func (d *Datasets) AddCases(ctx context.Context, name string, cases ...NewCase) (*Dataset, error) {
	return d.send(ctx, http.MethodPost, datasetPath(name)+"/cases", map[string]any{"cases": cases})
}

// AddCasesJSON adds cases given as JSON (each a case as POST
// /datasets/{name}/cases takes it, or as Cases read it) in the dataset's
// next version.
func (d *Datasets) AddCasesJSON(ctx context.Context, name string, cases []json.RawMessage) (*Dataset, error) {
	return d.send(ctx, http.MethodPost, datasetPath(name)+"/cases", map[string]any{"cases": cases})
}

// RemoveCase removes a case from a dataset, in its next version, which it
// returns; the versions before keep the case.
func (d *Datasets) RemoveCase(ctx context.Context, name, caseID string) (*Dataset, error) {
	return d.send(ctx, http.MethodDelete, datasetPath(name)+"/cases/"+esc(caseID), nil)
}

func (d *Datasets) send(ctx context.Context, method, path string, body any) (*Dataset, error) {
	var ds Dataset
	if _, err := d.c.do(ctx, request{method: method, path: path, body: body}, &ds); err != nil {
		return nil, err
	}
	return &ds, nil
}

// Get reads version (0: the latest) of a dataset.
func (d *Datasets) Get(ctx context.Context, name string, version int) (*Dataset, error) {
	path := datasetPath(name)
	if version > 0 {
		path += "/versions/" + strconv.Itoa(version)
	}
	var ds Dataset
	if _, err := d.c.do(ctx, request{method: http.MethodGet, path: path}, &ds); err != nil {
		return nil, err
	}
	return &ds, nil
}

// List reads a page of the tenant's datasets, at their latest versions,
// by name; limit 0 takes the server's default, cursor is a page's
// NextCursor.
func (d *Datasets) List(ctx context.Context, limit int, cursor string) (*Page[Dataset], error) {
	var page Page[Dataset]
	if _, err := d.c.do(ctx, request{method: http.MethodGet, path: "/datasets", query: pageQuery(limit, cursor)}, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// Cases reads a page of the cases of version (0: the latest) of a
// dataset, in the order they were added.
func (d *Datasets) Cases(ctx context.Context, name string, version, limit int, cursor string) (*Page[Case], error) {
	q := pageQuery(limit, cursor)
	if version > 0 {
		q.Set("version", strconv.Itoa(version))
	}
	var page Page[Case]
	if _, err := d.c.do(ctx, request{method: http.MethodGet, path: datasetPath(name) + "/cases", query: q}, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// Delete deletes a dataset and its cases; its name taken again goes on
// from its last version.
func (d *Datasets) Delete(ctx context.Context, name string) error {
	_, err := d.c.do(ctx, request{method: http.MethodDelete, path: datasetPath(name)}, nil)
	return err
}
