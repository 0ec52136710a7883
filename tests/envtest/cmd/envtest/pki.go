package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// pki holds the paths of every credential file envtest hands to
// kube-apiserver. Files live in <dir>/pki and are created once, then reused
// on restart, so kubeconfigs and ServiceAccount tokens stay valid.
type pki struct {
	Dir           string
	CACert        string // CA for the serving cert and the client certs
	CAKey         string
	ServingCert   string // kube-apiserver serving cert (127.0.0.1, localhost, ...)
	ServingKey    string
	AdminCert     string // client cert: CN=envtest-admin, O=system:masters
	AdminKey      string
	SAKey         string // RSA private key that signs ServiceAccount tokens
	SAPub         string // matching public key that verifies them
	TokenFile     string // --token-auth-file (CSV) holding the admin token
	AdminToken    string // bearer token of user "envtest-admin" (system:masters)
	CACertPEMData []byte
}

const adminUser = "envtest-admin"

func ensurePKI(dir string) (*pki, error) {
	p := &pki{
		Dir:         dir,
		CACert:      filepath.Join(dir, "ca.crt"),
		CAKey:       filepath.Join(dir, "ca.key"),
		ServingCert: filepath.Join(dir, "apiserver.crt"),
		ServingKey:  filepath.Join(dir, "apiserver.key"),
		AdminCert:   filepath.Join(dir, "admin.crt"),
		AdminKey:    filepath.Join(dir, "admin.key"),
		SAKey:       filepath.Join(dir, "sa.key"),
		SAPub:       filepath.Join(dir, "sa.pub"),
		TokenFile:   filepath.Join(dir, "tokens.csv"),
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}

	if !allExist(p.CACert, p.CAKey, p.ServingCert, p.ServingKey, p.AdminCert, p.AdminKey) {
		if err := p.generateCerts(); err != nil {
			return nil, fmt.Errorf("generating certificates: %w", err)
		}
	}
	if !allExist(p.SAKey, p.SAPub) {
		if err := p.generateSAKey(); err != nil {
			return nil, fmt.Errorf("generating service account key: %w", err)
		}
	}
	if !allExist(p.TokenFile) {
		buf := make([]byte, 24)
		if _, err := rand.Read(buf); err != nil {
			return nil, err
		}
		line := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n", hex.EncodeToString(buf), adminUser, adminUser)
		if err := writeAtomic(p.TokenFile, []byte(line), 0o600); err != nil {
			return nil, err
		}
	}

	tok, err := os.ReadFile(p.TokenFile)
	if err != nil {
		return nil, err
	}
	p.AdminToken, _, _ = strings.Cut(strings.TrimSpace(string(tok)), ",")
	if p.AdminToken == "" {
		return nil, fmt.Errorf("%s: no token found", p.TokenFile)
	}
	if p.CACertPEMData, err = os.ReadFile(p.CACert); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *pki) generateCerts() error {
	now := time.Now().Add(-time.Hour)
	notAfter := now.Add(10 * 365 * 24 * time.Hour)

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "laneway-envtest-ca"},
		NotBefore:             now,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}

	leaf := func(tmpl *x509.Certificate, certPath, keyPath string) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl.SerialNumber = serial()
		tmpl.NotBefore, tmpl.NotAfter = now, notAfter
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
		tmpl.BasicConstraintsValid = true
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		if err := writeKey(keyPath, key); err != nil {
			return err
		}
		return writeAtomic(certPath, pemBytes("CERTIFICATE", der), 0o644)
	}

	err = leaf(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{
			"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local",
		},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), net.ParseIP("10.0.0.1")},
	}, p.ServingCert, p.ServingKey)
	if err != nil {
		return err
	}
	err = leaf(&x509.Certificate{
		Subject:     pkix.Name{CommonName: adminUser, Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, p.AdminCert, p.AdminKey)
	if err != nil {
		return err
	}
	// The CA goes last: its presence marks the set as complete.
	if err := writeKey(p.CAKey, caKey); err != nil {
		return err
	}
	return writeAtomic(p.CACert, pemBytes("CERTIFICATE", caDER), 0o644)
}

func (p *pki) generateSAKey() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := writeAtomic(p.SAKey, pemBytes("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key)), 0o600); err != nil {
		return err
	}
	return writeAtomic(p.SAPub, pemBytes("PUBLIC KEY", pub), 0o644)
}

func writeKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writeAtomic(path, pemBytes("PRIVATE KEY", der), 0o600)
}

func pemBytes(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err)
	}
	return n.Add(n, big.NewInt(1))
}

func allExist(paths ...string) bool {
	for _, p := range paths {
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			return false
		}
	}
	return true
}

// writeAtomic writes data to a temp file next to path and renames it into
// place, so readers never observe a partially written file.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
