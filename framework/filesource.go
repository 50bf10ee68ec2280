package framework

import (
	"log/slog"

	"github.com/tidemark-go/tidemark/feed"
)

// openFileSource makes the file source of a feed configured by file name.
// It opens nothing yet: the source opens its input at its first poll.
func openFileSource(fc FeedConfig, log *slog.Logger) (feed.Source, error) {
	return feed.NewFileSource(fileSourceConfig(fc, log))
}

// fileSourceConfig is the file source's configuration of a feed: group
// commit under SyncEveryCommit unless FileConfig.SyncCommit asks otherwise.
func fileSourceConfig(fc FeedConfig, log *slog.Logger) feed.Config {
	return feed.Config{
		Path:         fc.File.Filename,
		Paths:        fc.File.Paths,
		Exclude:      fc.File.Exclude,
		ForgetAfter:  fc.File.ForgetAfter,
		Name:         fc.Name,
		Strategy:     fc.File.ReadStrategy,
		PointerDir:   fc.File.PointerDir,
		Rotated:      fc.File.Rotated,
		RotateWait:   fc.File.RotateWait,
		MaxLineBytes: fc.File.MaxLineBytes,
		Sync:         fc.File.Sync,
		SyncInterval: fc.File.SyncInterval,
		GroupCommit:  fc.File.Sync == feed.SyncEveryCommit && !fc.File.SyncCommit,
		Logger:       log.With("feed", fc.Name),
		OnReject:     fc.File.OnReject,
	}
}
