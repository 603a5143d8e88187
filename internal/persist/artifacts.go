package persist

import (
	"context"
	"errors"

	"github.com/agentd/agentd"
)

// ArtifactInsert commits the artifact of a call's result, with the call's
// finish: both or neither. The artifact takes the tenant and conversation
// of the call's run.
type ArtifactInsert struct {
	RunID, ToolCallID string
	Artifact          agentd.Artifact
}

func (o ArtifactInsert) queue(b *batch) error {
	b.exec("insert artifact", insertArtifact, o.Artifact.ID, o.RunID, o.ToolCallID, o.Artifact.MediaType,
		o.Artifact.Size(), o.Artifact.SHA256, o.Artifact.Content)
	return nil
}

const insertArtifact = `INSERT INTO artifacts (id, tenant_id, conversation_id, run_id, tool_call_id,
	media_type, size, sha256, content)
	SELECT $1, r.tenant_id, r.conversation_id, r.id, $3, $4, $5, $6, $7 FROM runs r WHERE r.id = $2`

// ArtifactGet returns the artifact id of a tenant's run, with its content,
// or ErrArtifactNotFound.
func (s *Store) ArtifactGet(ctx context.Context, tenantID, runID, id string) (agentd.Artifact, error) {
	a := agentd.Artifact{ID: id, RunID: runID}
	err := s.pool.QueryRow(ctx, `SELECT tool_call_id, media_type, sha256, content, created_at
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
