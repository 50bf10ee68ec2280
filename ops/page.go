package ops

import (
	"bytes"
	"html/template"
	"math"
	"net/http"
)

// pageTemplate is the human page at /: the same facts as /status, reloading
// itself every Refresh.
var pageTemplate = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="{{.Refresh}}">
<title>tidemark</title>
<style>
body { font-family: sans-serif; margin: 1em 2em; }
table { border-collapse: collapse; margin-bottom: 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: right; }
th { background: #eee; }
td.l, th.l { text-align: left; }
.stalled { background: #fdd; }
.settled { color: #080; }
.bad { color: #b00; font-weight: bold; }
</style>
</head>
<body>
<h1>tidemark</h1>
<p>At {{.Report.Time.Format "2006-01-02 15:04:05 UTC"}}; this page reloads every {{.Refresh}} s. JSON: <a href="status">/status</a>, metrics: <a href="metrics">/metrics</a>.</p>
{{range .Report.Errors}}<p class="bad">{{.}}</p>{{end}}
<h2>Feeds</h2>
<table>
<tr><th class="l">feed</th><th class="l">state</th><th>epoch</th><th>read</th><th>pointer</th><th>size</th><th>behind</th><th>pending acks</th><th>consumers</th><th>read lines</th><th>dropped</th><th>failed</th><th>skipped</th><th class="l">settled / stalled</th></tr>
{{range .Report.Feeds}}<tr{{if .Stalled}} class="stalled"{{end}}>
<td class="l" title="{{.Path}}">{{.Name}}</td>
<td class="l">{{.State}}{{if .Detail}}: {{.Detail}}{{end}}</td>
<td>{{.Epoch}}</td><td>{{.ReadPosition}}</td><td>{{.PointerPosition}}</td><td>{{.FileSize}}</td><td>{{.BytesBehind}}</td>
<td>{{.PendingAcks}}</td><td>{{.Consumers}}</td><td>{{.Read}}</td><td>{{.Dropped}}</td><td>{{.Failed}}</td><td>{{.Skipped}}</td>
<td class="l">{{if .Stalled}}<span class="bad">stalled: {{.StallReason}}</span>{{else if .Settled}}<span class="settled">settled</span>{{else}}running{{end}}{{if .LastPointerError}}<br><span class="bad">pointer write failed: {{.LastPointerError}}</span>{{end}}</td>
</tr>
{{end}}</table>
<h2>Queues</h2>
<table>
<tr><th class="l">feed</th><th class="l">group</th><th>depth</th><th>processed</th><th>failures</th><th>skipped</th><th>dropped</th><th class="l">state</th></tr>
{{range $f := .Report.Feeds}}{{range .Groups}}<tr{{if or .Removed .Fenced}} class="stalled"{{end}}>
<td class="l">{{$f.Name}}</td><td class="l">{{.Group}}</td><td>{{.Depth}}</td><td>{{.Processed}}</td><td>{{.Failures}}</td><td>{{.Skipped}}</td><td>{{.Dropped}}</td>
<td class="l">{{if .Removed}}removed, holds the pointer: <code>tidemark release --addr {{$.Host}} --feed {{$f.Name}} --consumer {{.Group}}</code>{{else if .Fenced}}fenced{{else}}live{{end}}</td>
</tr>
{{end}}{{end}}</table>
{{if .Report.Stores}}<h2>Stores</h2>
<table>
<tr><th class="l">store</th><th class="l">backend</th><th>applied</th><th>re-deliveries skipped</th><th>staged</th><th>batches</th><th>failed commits</th><th class="l">durable positions</th></tr>
{{range .Report.Stores}}<tr{{if .Failed}} class="stalled"{{end}}>
<td class="l" title="{{.Dir}}">{{.Name}}</td><td class="l">{{.Backend}}{{if .Sync}} (sync){{end}}</td><td>{{.Applied}}</td><td>{{.Skipped}}</td><td>{{.Staged}}</td><td>{{.Commits}}</td><td>{{.FailedCommits}}</td>
<td class="l">{{range .Positions}}{{.Feed}}: {{.Position}} (epoch {{.Epoch}})<br>{{end}}{{if .Failed}}<span class="bad">{{.LastError}}</span>{{end}}</td>
</tr>
{{end}}</table>{{end}}
</body>
</html>
`))

func (l *Listener) servePage(w http.ResponseWriter, r *http.Request) {
	var buf bytes.Buffer
	refresh := int(math.Ceil(l.cfg.Refresh.Seconds()))
	if err := pageTemplate.Execute(&buf, struct {
		Refresh int
		Host    string
		Report  Report
	}{refresh, r.Host, l.report()}); err != nil {
		httpError(w, http.StatusInternalServerError, "render page: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(buf.Bytes())
}
