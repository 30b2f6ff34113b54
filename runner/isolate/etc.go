package isolate

import (
	"fmt"
	"path/filepath"
)

// SandboxUID and SandboxGID are the ids the sandbox's user has inside its user namespace. Outside, they map
// to the host ids the sandbox runs as (Config.HostUID), never to host root.
const (
	SandboxUID = 1000
	SandboxGID = 1000
)

// etcAllowed are the host entries under /etc the sandbox sees, read-only: what the dynamic loader, TLS
// (public CA certificates), Debian's alternatives symlinks, time zones, shells and common tools read.
// Nothing root-only and nothing naming the host's users, services or credentials: /etc/ssl/private,
// shadow, ssh host keys, sudoers, machine-id, agent or cloud configuration never enter the sandbox.
var etcAllowed = []string{
	"alternatives", "bash.bashrc", "ca-certificates", "ca-certificates.conf", "debian_version", "environment",
	"gai.conf", "host.conf", "inputrc", "issue", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime",
	"login.defs", "mime.types", "os-release", "profile", "profile.d", "protocols", "rpc", "services", "skel",
	"ssl/certs", "ssl/openssl.cnf", "terminfo", "timezone", "xattr.conf", "zoneinfo",
}

// etcFiles are the files the sandbox's /etc gets made for it: its own users and groups (root and the
// sandbox user, so `id` and tools that look up the user work), its own hostname and hosts, and a resolver
// pointing at dns (the network's forwarder; no resolver when ""). They are handed to bubblewrap through
// pipes (--ro-bind-data), so nothing is written to the host.
func etcFiles(dns string) map[string]string {
	files := map[string]string{
		"/etc/passwd": "root:x:0:0:root:/root:/usr/sbin/nologin\n" +
			fmt.Sprintf("%s:x:%d:%d:sandbox:%s:/bin/bash\n", SandboxUser, SandboxUID, SandboxGID, WorkspaceMount) +
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		"/etc/group":         fmt.Sprintf("root:x:0:\n%s:x:%d:\nnogroup:x:65534:\n", SandboxUser, SandboxGID),
		"/etc/hostname":      Hostname + "\n",
		"/etc/hosts":         "127.0.0.1\tlocalhost " + Hostname + "\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"/etc/nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n",
	}
	if dns != "" {
		files["/etc/resolv.conf"] = "nameserver " + dns + "\noptions timeout:2 attempts:2\n"
	}
	return files
}

// etcMounts returns the bubblewrap arguments that bind the allowed host entries under hostRoot's /etc, in
// order, into a fresh /etc (a tmpfs the caller mounts first). A missing entry is skipped; a symlink is
// recreated as the same symlink (it may point into /usr or at a sibling that is bound too).
func etcMounts(hostRoot string) ([]string, error) {
	var args []string
	for _, rel := range etcAllowed {
		a, err := mirror(filepath.Join(hostRoot, "etc", rel), "/etc/"+rel, false)
		if err != nil {
			return nil, err
		}
		args = append(args, a...)
	}
	return args, nil
}
