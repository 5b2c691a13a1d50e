package plugintoken

import (
	"fmt"
	"os"
	"path/filepath"
)

// The files of a ServiceAccount mount, named as the kubelet names them:
// client-go's rest.InClusterConfig reads the token and the CA from
// /var/run/secrets/kubernetes.io/serviceaccount, clientcmd's in-cluster
// namespace the namespace file.
const (
	TokenFile     = "token"
	CAFile        = "ca.crt"
	NamespaceFile = "namespace"
)

// apiAccess is what the directory holds.
type apiAccess struct {
	token     []byte
	ca        []byte
	namespace string
}

// write puts the files in dir, the token last: a reader that finds a token
// finds the CA and namespace beside it. Each file is replaced whole (a
// temporary file renamed over it), so a reader never sees half a token.
// The token is readable by the writer's uid only; the plugin runs as the
// same uid (its socket admits no other).
func (a apiAccess) write(dir string) error {
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{CAFile, a.ca, 0o644},
		{NamespaceFile, []byte(a.namespace), 0o644},
		{TokenFile, a.token, 0o600},
	} {
		if err := replaceFile(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	return nil
}

// replaceFile writes data to path through a temporary file in the same
// directory, renamed over path.
func replaceFile(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // after a rename, there is nothing left to remove
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if err == nil {
		err = tmp.Close()
	} else {
		_ = tmp.Close()
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
