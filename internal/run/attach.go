package run

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compact"
	"github.com/agentd/agentd/internal/llm"
)

// DefaultMaxInputFilesBytes is Config.MaxInputFilesBytes's default: 20
// MiB of images and files in one model request.
const DefaultMaxInputFilesBytes = 20 << 20

// attach gives st the bytes of the images and files its model is sent
// (agentd.RunState.Attachments): those of the messages the model sees
// (compact.Visible), the newest first, up to the request's cap; the
// older ones past it are sent as a note that names them. What the
// execution loaded before is kept, and what it no longer sends dropped,
// so that it holds at most the cap in memory.
func (x *execution) attach(st *agentd.RunState) error {
	want := attachedIDs(compact.Visible(st.Messages, st.Compaction), x.d.limits.inputFilesBytes)
	if len(want) == 0 && len(x.files) == 0 {
		return nil
	}
	var missing []string
	for _, id := range want {
		if _, ok := x.files[id]; !ok {
			missing = append(missing, id)
		}
	}
	keep := make(map[string][]byte, len(want))
	for _, id := range want {
		if b, ok := x.files[id]; ok {
			keep[id] = b
		}
	}
	if len(missing) > 0 {
		ctx, cancel := context.WithTimeout(x.durable(), 30*time.Second)
		loaded, err := x.d.store.ArtifactsLoad(ctx, st.Run.ID, missing)
		cancel()
		if err != nil {
			return fmt.Errorf("load the run's images and files: %w", err)
		}
		for id, b := range loaded {
			keep[id] = b
		}
	}
	x.files = keep
	st.Attachments = make(map[string][]byte, len(keep))
	for id, b := range keep {
		st.Attachments[id] = b
	}
	return nil
}

// attachedIDs are the artifacts of the images and files of msgs that a
// request sends within limit bytes: the newest first, each whole or not at
// all.
func attachedIDs(msgs []agentd.Message, limit int64) []string {
	var ids []string
	var total int64
	for i := len(msgs) - 1; i >= 0; i-- {
		content := msgs[i].Content
		for j := range content {
			p := content[j]
			if !p.Attached() || p.ArtifactID == "" {
				continue
			}
			if total+p.Size > limit {
				continue // an older, smaller one may still fit
			}
			total += p.Size
			ids = append(ids, p.ArtifactID)
		}
	}
	return ids
}

// userMessage is a user's (or a system) message as the model is sent it:
// its texts, its images by URL or with their bytes, and its files with
// their bytes, from files (agentd.RunState.Attachments). An image or a
// file whose bytes are not there is a text that names it. Beside images
// and files, an empty text is left out (some APIs refuse one).
func userMessage(m agentd.Message, files map[string][]byte) llm.Message {
	msg := llm.Message{Role: llm.Role(m.Role), Parts: make([]llm.Part, 0, len(m.Content))}
	attached := slices.ContainsFunc(m.Content, agentd.Part.Attached)
	for _, p := range m.Content {
		switch p.Type {
		case agentd.PartText:
			if p.Text == "" && attached {
				continue
			}
			msg.Parts = append(msg.Parts, llm.Text(p.Text))
		case agentd.PartImage, agentd.PartFile:
			msg.Parts = append(msg.Parts, attachedPart(p, files))
		}
	}
	return msg
}

// attachedPart is image or file part p as the model is sent it.
func attachedPart(p agentd.Part, files map[string][]byte) llm.Part {
	if p.Type == agentd.PartImage && p.ArtifactID == "" {
		return llm.Part{Type: llm.PartImage, URL: p.URL, Detail: p.Detail}
	}
	data, ok := files[p.ArtifactID]
	if !ok {
		return llm.Text(omittedNote(p))
	}
	if p.Type == agentd.PartImage {
		return llm.Part{Type: llm.PartImage, Data: data, MediaType: p.MediaType, Detail: p.Detail}
	}
	name := p.Filename
	if name == "" {
		name = "document" + map[string]string{"application/pdf": ".pdf", "text/markdown": ".md", "text/csv": ".csv"}[p.MediaType]
		if name == "document" {
			name += ".txt"
		}
	}
	return llm.Part{Type: llm.PartFile, Data: data, MediaType: p.MediaType, Filename: name}
}

// omittedNote stands, in what the model is sent, for an image or a file
// whose bytes the request leaves out.
func omittedNote(p agentd.Part) string {
	what := string(p.Type)
	if p.Filename != "" {
		what += " " + p.Filename
	}
	return fmt.Sprintf("[%s (%s, %d bytes) was sent earlier in the conversation; it is left out here: "+
		"a request holds at most the newest images and files within the server's cap]", what, p.MediaType, p.Size)
}
