package snapshot

import (
	"io/fs"
	"os"
	"syscall"
)

// openFlags opens a file for hashing: non-blocking, so a file swapped for a FIFO between the walk and
// the open cannot hang the snapshot.
const openFlags = os.O_RDONLY | syscall.O_NONBLOCK

// fileIDOf returns what identifies a file's content without reading it.
func fileIDOf(fi fs.FileInfo) (fileID, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{
		dev:   uint64(st.Dev),
		ino:   st.Ino,
		size:  st.Size,
		mtime: st.Mtim.Nano(),
		ctime: st.Ctim.Nano(),
	}, true
}
