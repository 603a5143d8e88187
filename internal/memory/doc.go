// Package memory is the service over the memory store (persist's Memory*
// methods): it embeds values and queries with the models file's embedding
// model, when it names one, and ranks search results by reciprocal rank
// fusion of the full-text ranks and the vector similarity ranks. The API's
// /memory routes and the engine's memory tools call it; the store keeps
// the versions, the overlays, the limits and the counters.
//
// Vectors are compared exactly: PostgreSQL computes the cosine of every
// candidate the caller may reach (one user's memory is thousands of items,
// not millions), with the vector extension's operator where it is
// installed (detected, never required).
//
// Its Extractor makes the extraction jobs (docs/memory.md, "Extraction"):
// after a run that asked for memory.extract completed, it asks a model
// (the llm port, through the engine's router) what of the run's turn is
// worth remembering, and writes it with its provenance; the items, the
// job's end and the call's ledger row commit together under the attempt's
// fence (persist's MemoryExtractionDone), so that a job is written once,
// whatever instances die.
//
// It imports the domain (agentd), internal/llm (the model port),
// internal/compact (the models' prices), internal/persist (the store's
// parameters of an extraction's writes) and internal/metrics.
package memory
