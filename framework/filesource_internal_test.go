package framework

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tidemark-go/tidemark/feed"
)

// A file feed commits through group commit under the default sync policy,
// and synchronously when SyncCommit asks for it or when the policy does not
// wait for the disk anyway.
func TestFileSourceGroupCommitByDefault(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		file  FileConfig
		group bool
	}{
		{FileConfig{Filename: "in"}, true},
		{FileConfig{Filename: "in", SyncCommit: true}, false},
		{FileConfig{Filename: "in", Sync: feed.SyncInterval}, false},
		{FileConfig{Filename: "in", Sync: feed.SyncNever}, false},
	} {
		fc := FeedConfig{Name: "orders", File: &tc.file}
		require.Equal(t, tc.group, fileSourceConfig(fc, log).GroupCommit, "%+v", tc.file)
	}
}
