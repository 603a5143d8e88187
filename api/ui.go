package api

import (
	"embed"
	"io/fs"
	"net/http"
)

// uiFiles are the run viewer's pages: plain HTML, CSS and JavaScript
// modules, built into the binary, so the viewer needs nothing from the
// internet and no build step.
//
//go:embed ui
var uiFiles embed.FS

// uiHandler serves the run viewer under /ui/. The pages hold no data: they
// read the API, with the key the person typed.
func uiHandler() http.Handler {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // the embedded directory is always there
	}
	files := http.StripPrefix("/ui/", http.FileServer(http.FS(sub)))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "no-cache")
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data: blob:; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		files.ServeHTTP(w, r)
	})
}
