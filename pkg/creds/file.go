package creds

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// Errors of ReadFile, besides those of the file system (fs.ErrNotExist,
// fs.ErrPermission, …).
var (
	ErrNotRegular = errors.New("not a regular file")
	ErrTooLarge   = errors.New("over the limit")
)

// ReadFile reads the regular file at path (following symlinks), refusing
// one over limit bytes. It checks the type before opening, so that a FIFO
// cannot block it. Errors name the path.
func ReadFile(path string, limit int64) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w", path, ErrNotRegular)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: %w of %d bytes", path, ErrTooLarge, limit)
	}
	return data, nil
}
