package framework

import (
	"errors"
	"log/slog"

	"github.com/tidemark-go/tidemark/feed"
)

// openFileSource makes the file source of a feed configured by file name.
func openFileSource(fc FeedConfig, log *slog.Logger) (feed.Source, error) {
	return nil, errors.New("framework: file sources are not available yet")
}
