package main

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"
)

// keygen writes a new Ed25519 key pair: the private key readable by its
// owner only, and never over an existing file (a release manager's key is
// not replaced by a typo).
func keygen(keyPath, pubPath string) error {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(keyPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("writing the private key: %w", err)
	}
	_, err = f.Write(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing the private key: %w", err)
	}
	return writePublicKey(pubPath, pub)
}

// fingerprint is the hex SHA-256 of a public key's PKIX (DER) form: what
// `openssl pkey -pubin -in KEY.pub -outform DER | sha256sum` prints, and the
// keyid of every DSSE envelope the key signs.
func fingerprint(pub ed25519.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	return sha256Hex(der), nil
}

// checkPinned refuses a signing key whose public half is not the pinned
// public key: a release is signed by the project's key or by the one a fork
// pinned instead, never by a key made on the spot.
func checkPinned(keyPath, pinnedPath string) (ed25519.PrivateKey, error) {
	pinned, err := readPublicKey(pinnedPath)
	if err != nil {
		return nil, fmt.Errorf("the pinned public key: %w", err)
	}
	if _, err := os.Stat(keyPath); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no signing key at %s: the release manager provides it (RELEASE_KEY=path); a fork makes its own with make release-key", keyPath)
	}
	priv, err := readPrivateKey(keyPath)
	if err != nil {
		return nil, err
	}
	pub := priv.Public().(ed25519.PublicKey)
	if !pub.Equal(pinned) {
		got, _ := fingerprint(pub)
		want, _ := fingerprint(pinned)
		return nil, fmt.Errorf("signing key %s (fingerprint %s) is not the pinned release key %s (%s); RELEASE_PUB=path pins another", keyPath, got, pinnedPath, want)
	}
	return priv, nil
}

func writePublicKey(path string, pub ed25519.PublicKey) error {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
		return fmt.Errorf("writing the public key: %w", err)
	}
	return nil
}

func readPEM(path, want string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b, _ := pem.Decode(raw)
	if b == nil || b.Type != want {
		return nil, fmt.Errorf("%s: not a PEM %q block", path, want)
	}
	return b.Bytes, nil
}

func readPrivateKey(path string) (ed25519.PrivateKey, error) {
	der, err := readPEM(path, "PRIVATE KEY")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: a %T, not an Ed25519 key", path, k)
	}
	return priv, nil
}

func readPublicKey(path string) (ed25519.PublicKey, error) {
	der, err := readPEM(path, "PUBLIC KEY")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%s: a %T, not an Ed25519 key", path, k)
	}
	return pub, nil
}

// ed25519Key is a DSSE signer and verifier. Ed25519 signatures are
// deterministic, so an envelope is the same bytes each time.
type ed25519Key struct {
	priv ed25519.PrivateKey
	pub  ed25519.PublicKey
}

func (k ed25519Key) Sign(_ context.Context, data []byte) ([]byte, error) {
	if k.priv == nil {
		return nil, errors.New("no private key")
	}
	return ed25519.Sign(k.priv, data), nil
}

func (k ed25519Key) Verify(_ context.Context, data, sig []byte) error {
	if !ed25519.Verify(k.pub, data, sig) {
		return errors.New("signature does not match the key")
	}
	return nil
}

// KeyID is the hex SHA-256 of the public key's PKIX form, as DSSE's own
// helper computes it.
func (k ed25519Key) KeyID() (string, error) { return dsse.SHA256KeyID(k.pub) }

func (k ed25519Key) Public() crypto.PublicKey { return k.pub }

// signEnvelope wraps payload in a DSSE envelope signed by key.
func signEnvelope(ctx context.Context, key ed25519Key, payloadType string, payload []byte) (*dsse.Envelope, error) {
	s, err := dsse.NewEnvelopeSigner(key)
	if err != nil {
		return nil, err
	}
	return s.SignPayload(ctx, payloadType, payload)
}

// openEnvelope verifies a DSSE envelope against pub and returns its
// payload, which must be of payloadType.
func openEnvelope(ctx context.Context, pub ed25519.PublicKey, env *dsse.Envelope, payloadType string) ([]byte, error) {
	v, err := dsse.NewEnvelopeVerifier(ed25519Key{pub: pub})
	if err != nil {
		return nil, err
	}
	if env.PayloadType != payloadType {
		return nil, fmt.Errorf("payload type %q, want %q", env.PayloadType, payloadType)
	}
	_, payload, err := v.VerifyAndDecode(ctx, env)
	if err != nil {
		fp, _ := fingerprint(pub)
		return nil, fmt.Errorf("its signature is not the pinned key's (%s): %w", fp, err)
	}
	return payload, nil
}
