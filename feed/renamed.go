package feed

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/tidemark-go/tidemark"
	"github.com/tidemark-go/tidemark/feed/pointer"
)

// maxRenamedScan bounds the folder scan for an input renamed away while
// the source was stopped: a folder with more entries is not scanned.
const maxRenamedScan = 4096

// findRenamed looks in the input's folder for the file the pointer names
// (by its identity), renamed away while the source was stopped, and opens
// it when its content matches the pointer (leading bytes, length, bytes
// before the position). It stats every entry of the folder, reads only the
// candidate, and scans no folder of more than maxRenamedScan entries. It
// returns nil when there is no such file, and an error when the candidate
// cannot be read (the next Poll tries again).
func (s *stream) findRenamed(p pointer.Record) (*renamedInput, error) {
	dir := filepath.Dir(s.path)
	names, err := s.listDir(dir)
	switch {
	case err != nil:
		s.log.Warn("feed: cannot list the input's folder to look for the input renamed away: its unread lines, if any, are not read",
			"path", s.path, "folder", dir, "err", err)
		return nil, nil
	case len(names) > s.maxScan:
		s.log.Warn("feed: the input's folder has too many entries to look for the input renamed away: its unread lines, if any, are not read",
			"path", s.path, "folder", dir, "max_entries", s.maxScan)
		return nil, nil
	}
	base := filepath.Base(s.path)
	for _, name := range names {
		if name == base || strings.HasPrefix(name, base+pointer.Suffix) {
			continue
		}
		full := filepath.Join(dir, name)
		fi, err := s.fs.Stat(full)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if id, ok := fileIdentity(fi); !ok || id != p.Identity {
			continue
		}
		r, why, err := s.openRenamed(full, p)
		if err != nil {
			return nil, err
		}
		if r == nil {
			s.log.Warn("feed: a file in the input's folder has the identity the pointer names, but not its content (the inode was reused?): not read",
				"path", s.path, "file", full, "epoch", p.Epoch, "position", p.Position, "reason", why)
			return nil, nil
		}
		return r, nil
	}
	s.log.Info("feed: no file in the input's folder has the identity the pointer names: it was deleted, or moved out of the folder",
		"path", s.path, "folder", dir, "dev", p.Identity.Dev, "ino", p.Identity.Ino)
	return nil, nil
}

// openRenamed opens name and checks that it is the file p names, with the
// content p describes. It returns nil and why not otherwise, and an error
// when the file cannot be opened or read.
func (s *stream) openRenamed(name string, p pointer.Record) (*renamedInput, string, error) {
	f, fi, err := s.openInput(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrNotRegular) {
			return nil, "renamed again while being opened", nil
		}
		return nil, "", fmt.Errorf("feed: open %s, the input %s renamed away: %w; the next poll retries", name, s.path, err)
	}
	h := &inputFile{f: f, name: name}
	h.id, h.hasID = fileIdentity(fi)
	if !h.hasID || h.id != p.Identity {
		return nil, "renamed again while being opened", f.Close()
	}
	size := fi.Size()
	head, err := s.readHead(h, size)
	if err != nil {
		return nil, "", errors.Join(fmt.Errorf("feed: the input %s renamed away to %s: %w", s.path, name, err), f.Close())
	}
	fp := tidemark.Fingerprint{Len: len(head), Hash: pointer.HashBytes(head)}
	if why := sameContent(h, size, head, p.Position, p.Fingerprint, p.TailLen, p.TailHash); why != "" {
		return nil, why, f.Close()
	}
	return &renamedInput{in: h, size: size, fp: fp}, "", nil
}

// listDir returns the names in dir, at most s.maxScan+1 of them. It
// needs a file system whose opened folders list their names (the operating
// system's does).
func (s *stream) listDir(dir string) ([]string, error) {
	d, err := s.fs.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	l, ok := d.(interface {
		Readdirnames(n int) ([]string, error)
	})
	if !ok {
		// A wrapper of the operating system's file system (a fault
		// injector) whose files do not list: take the names from the
		// operating system; every stat and open still goes through s.fs.
		od, err := os.Open(dir)
		if err != nil {
			return nil, fmt.Errorf("the file system cannot list folders, nor the operating system this one: %w", err)
		}
		defer od.Close()
		l = od
	}
	names, err := l.Readdirnames(s.maxScan + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return names, nil
}
