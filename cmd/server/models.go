package main

import (
	"cmp"
	"slices"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compact"
)

// modelViews are the models the server offers (GET /models): those of the
// models file, in its order, and the default model def, first when the
// file does not name it.
func modelViews(profiles *compact.Profiles, def string) []agentd.ModelView {
	names := profiles.FileNames()
	if def != "" && !slices.Contains(names, def) {
		names = append([]string{def}, names...)
	}
	out := make([]agentd.ModelView, 0, len(names))
	for _, name := range names {
		p := profiles.For(name)
		v := agentd.ModelView{ID: name, Object: agentd.ObjectModel, Provider: p.Provider(),
			Upstream: cmp.Or(p.Route.Model, name), ContextWindow: p.ContextWindow, MaxOutputTokens: p.MaxOutputTokens,
			Default: name == def}
		for _, k := range []string{compact.InputText, compact.InputImage, compact.InputFile} {
			if p.Accepts(k) {
				v.Input = append(v.Input, k)
			}
		}
		if pr := p.Prices; pr != nil {
			cached, write := pr.CacheRates()
			v.Prices = &agentd.ModelPrice{Input: pr.Input, CachedInput: cached, CacheWrite: write, Output: pr.Output}
		}
		out = append(out, v)
	}
	return out
}
