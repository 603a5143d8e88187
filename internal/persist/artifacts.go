package persist

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/agentd/agentd"
)

// ArtifactInsert commits the artifact of a call's result, with the call's
// finish: both or neither; or, without a ToolCallID, an image or a file of
// a run's input, with the run. The artifact takes the tenant and
// conversation of the run.
type ArtifactInsert struct {
	RunID, ToolCallID string
	Artifact          agentd.Artifact
}

func (o ArtifactInsert) queue(b *batch) error {
	b.exec("insert artifact", insertArtifact, o.Artifact.ID, o.RunID, nullIfEmpty(o.ToolCallID), o.Artifact.MediaType,
		o.Artifact.Size(), o.Artifact.SHA256, o.Artifact.Content)
	return nil
}

// inputContent is the content stored for input message m of run runID,
// whose Parts are not empty, and the artifacts that hold its images' and
// files' bytes, to be inserted with it: each part with data names its
// artifact, and keeps its media type, size and name, never the bytes. An
// image by URL stays a URL.
func inputContent(runID string, m agentd.InputMessage) ([]agentd.Part, []ArtifactInsert) {
	content := make([]agentd.Part, 0, len(m.Parts))
	var arts []ArtifactInsert
	for _, p := range m.Parts {
		part := agentd.Part{Type: p.Type, Text: p.Text, URL: p.URL, Detail: p.Detail, Filename: p.Filename}
		if len(p.Data) > 0 {
			sum := sha256.Sum256(p.Data)
			a := agentd.Artifact{ID: newID(), RunID: runID, MediaType: p.MediaType, SHA256: hex.EncodeToString(sum[:]), Content: p.Data}
			arts = append(arts, ArtifactInsert{RunID: runID, Artifact: a})
			part.ArtifactID, part.MediaType, part.Size = a.ID, a.MediaType, int64(a.Size())
		}
		content = append(content, part)
	}
	return content, arts
}

// ArtifactsLoad returns the content of the artifacts ids of the
// conversation of run runID, by id: those of its input images and files
// that its model is sent. An id that is not the conversation's is left
// out.
func (s *Store) ArtifactsLoad(ctx context.Context, runID string, ids []string) (map[string][]byte, error) {
	out := make(map[string][]byte, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT a.id::text, a.content FROM artifacts a
		WHERE a.conversation_id = (SELECT conversation_id FROM runs WHERE id = $1) AND a.id = ANY($2::uuid[])`, runID, ids)
	if err != nil {
		return nil, fmt.Errorf("load artifacts: %w", translate(err))
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var content []byte
		if err := rows.Scan(&id, &content); err != nil {
			return nil, fmt.Errorf("load artifacts: %w", translate(err))
		}
		out[id] = content
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load artifacts: %w", translate(err))
	}
	return out, nil
}

const insertArtifact = `INSERT INTO artifacts (id, tenant_id, conversation_id, run_id, tool_call_id,
	media_type, size, sha256, content)
	SELECT $1, r.tenant_id, r.conversation_id, r.id, $3, $4, $5, $6, $7 FROM runs r WHERE r.id = $2`

// ArtifactGet returns the artifact id of a tenant's run, with its content,
// or ErrArtifactNotFound.
func (s *Store) ArtifactGet(ctx context.Context, tenantID, runID, id string) (agentd.Artifact, error) {
	a := agentd.Artifact{ID: id, RunID: runID}
	err := s.pool.QueryRow(ctx, `SELECT coalesce(tool_call_id::text, ''), media_type, sha256, content, created_at
		FROM artifacts WHERE id = $1 AND run_id = $2 AND tenant_id = $3`, id, runID, tenantID).
		Scan(&a.ToolCallID, &a.MediaType, &a.SHA256, &a.Content, &a.CreatedAt)
	if err := translate(err); err != nil {
		if errors.Is(err, ErrInvalidValue) { // an id that is not a uuid
			err = agentd.ErrNotFound
		}
		return agentd.Artifact{}, notFound(err, agentd.ErrArtifactNotFound)
	}
	return a, nil
}

// ArtifactRead reads length bytes from offset (0-based) of artifact id, if
// it belongs to the conversation of run runID; else ErrArtifactNotFound.
// It is what read_artifact reads through.
func (s *Store) ArtifactRead(ctx context.Context, runID, id string, offset, length int64) (agentd.ArtifactPage, error) {
	var p agentd.ArtifactPage
	err := s.pool.QueryRow(ctx, `SELECT a.size, a.media_type, substring(a.content FROM $3::int + 1 FOR $4::int)
		FROM artifacts a JOIN runs r ON r.conversation_id = a.conversation_id AND r.tenant_id = a.tenant_id
		WHERE r.id = $1 AND a.id = $2`, runID, id, offset, length).Scan(&p.Size, &p.MediaType, &p.Content)
	if err := translate(err); err != nil {
		if errors.Is(err, agentd.ErrNotFound) || errors.Is(err, ErrInvalidValue) {
			return p, agentd.ErrArtifactNotFound // ErrInvalidValue: an id that is not a uuid
		}
		return p, err
	}
	return p, nil
}
