package framework

import (
	"log/slog"

	"github.com/tidemark-go/tidemark/feed"
)

// openFileSource makes the file source of a feed configured by file name.
// It opens nothing yet: the source opens its input at its first poll.
func openFileSource(fc FeedConfig, log *slog.Logger) (feed.Source, error) {
	return feed.NewFileSource(feed.Config{
		Path:         fc.File.Filename,
		Strategy:     fc.File.ReadStrategy,
		MaxLineBytes: fc.File.MaxLineBytes,
		Sync:         fc.File.Sync,
		SyncInterval: fc.File.SyncInterval,
		Logger:       log.With("feed", fc.Name),
		OnReject:     fc.File.OnReject,
	})
}
