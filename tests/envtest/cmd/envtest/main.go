// Command envtest runs a single-process Kubernetes control plane for tests:
// an embedded etcd plus an in-process kube-apiserver (no controller-manager,
// no scheduler, no kubelet). It writes an admin kubeconfig, prints
// "envtest ready: ..." on stdout once /readyz answers OK, and runs until
// SIGINT/SIGTERM, then stops the apiserver and etcd cleanly.
//
// Every kube-apiserver flag is accepted as well; envtest only changes
// defaults, and any kube-apiserver flag given on the command line wins.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/server/v3/embed"
	"golang.org/x/sys/unix"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	cliflag "k8s.io/component-base/cli/flag"
	basecompatibility "k8s.io/component-base/compatibility"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

type config struct {
	dir            string
	kubeconfigOut  string
	etcdClientPort int
	etcdPeerPort   int
	etcdNoFsync    bool
	etcdLogLevel   string
	readyTimeout   time.Duration
	stopTimeout    time.Duration
	logFile        string
	exitWithParent bool
}

func main() {
	os.Exit(run())
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "envtest: "+format+"\n", args...)
}

func run() int {
	var c config
	s := options.NewServerRunOptions()
	fss := s.Flags()
	efs := fss.FlagSet("envtest")
	efs.StringVar(&c.dir, "dir", "", "State directory (etcd data, pki, kubeconfig). Reused across restarts. Default: a fresh temp dir, removed on exit.")
	efs.StringVar(&c.kubeconfigOut, "kubeconfig-out", "", "Where to write the admin kubeconfig (default <dir>/kubeconfig). Written once the apiserver is ready.")
	efs.IntVar(&c.etcdClientPort, "etcd-client-port", 0, "Embedded etcd client port on 127.0.0.1 (0 = pick a free port).")
	efs.IntVar(&c.etcdPeerPort, "etcd-peer-port", 0, "Embedded etcd peer port on 127.0.0.1 (0 = reuse the previous one from <dir>, else pick a free port).")
	efs.BoolVar(&c.etcdNoFsync, "etcd-unsafe-no-fsync", true, "Disable fsync in the embedded etcd (fast; data may be lost on a machine crash).")
	efs.StringVar(&c.etcdLogLevel, "etcd-log-level", "warn", "Embedded etcd log level (debug, info, warn, error).")
	efs.DurationVar(&c.readyTimeout, "ready-timeout", 120*time.Second, "Give up if /readyz is not OK within this time.")
	efs.DurationVar(&c.stopTimeout, "stop-timeout", 30*time.Second, "Maximum time for a clean shutdown before exiting anyway.")
	efs.StringVar(&c.logFile, "log-file", "", "Append all logs (etcd, kube-apiserver) to this file instead of stderr.")
	efs.BoolVar(&c.exitWithParent, "exit-with-parent", false, "Shut down when the parent process exits (for test harnesses that may crash).")

	fs := pflag.NewFlagSet("envtest", pflag.ContinueOnError)
	fs.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	for _, name := range append([]string{"envtest"}, fss.Order...) {
		if f := fss.FlagSets[name]; f != nil {
			fs.AddFlagSet(f)
		}
	}
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: envtest [--dir DIR] [--kubeconfig-out FILE] [kube-apiserver flags...]\n\nenvtest flags:\n%s\nAll kube-apiserver flags are accepted too (run with --help-all to list them).\n", efs.FlagUsages())
	}
	helpAll := fs.Bool("help-all", false, "Show all flags, including kube-apiserver's.")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == pflag.ErrHelp {
			return 0
		}
		logf("%v", err)
		return 2
	}
	if *helpAll {
		fmt.Fprint(os.Stdout, fs.FlagUsages())
		return 0
	}
	if fs.NArg() > 0 {
		logf("unexpected arguments: %v", fs.Args())
		return 2
	}

	if c.logFile != "" {
		// Redirect fd 2 itself so that klog, etcd's zap logger and grpc all
		// follow. A harness that pipes stderr could otherwise block us.
		f, err := os.OpenFile(c.logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			logf("%v", err)
			return 1
		}
		if err := unix.Dup2(int(f.Fd()), 2); err != nil {
			logf("redirecting stderr to %s: %v", c.logFile, err)
			return 1
		}
		f.Close()
	}

	// State dir.
	removeDir := false
	if c.dir == "" {
		d, err := os.MkdirTemp("", "laneway-envtest-")
		if err != nil {
			logf("%v", err)
			return 1
		}
		c.dir, removeDir = d, true
	}
	dir, err := filepath.Abs(c.dir)
	if err != nil {
		logf("%v", err)
		return 1
	}
	if removeDir {
		defer os.RemoveAll(dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		logf("%v", err)
		return 1
	}
	if c.kubeconfigOut == "" {
		c.kubeconfigOut = filepath.Join(dir, "kubeconfig")
	}
	if c.kubeconfigOut, err = filepath.Abs(c.kubeconfigOut); err != nil {
		logf("%v", err)
		return 1
	}
	// A stale kubeconfig must not look like a ready server.
	_ = os.Remove(c.kubeconfigOut)

	p, err := ensurePKI(filepath.Join(dir, "pki"))
	if err != nil {
		logf("%v", err)
		return 1
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigCh := make(chan os.Signal, 2)
	signal.Notify(sigCh, syscall.SIGINT, syscall.SIGTERM)
	parentGone := make(chan struct{}) // stays open unless --exit-with-parent
	if c.exitWithParent {
		go watchParent(parentGone)
	}

	// Embedded etcd, unless the caller points the apiserver at its own.
	var etcd *embed.Etcd
	var etcdErr <-chan error
	if !fs.Changed("etcd-servers") {
		etcd, err = startEtcd(&c, dir)
		if err != nil {
			logf("starting etcd: %v", err)
			return 1
		}
		etcdErr = etcd.Err()
		defer closeEtcd(etcd, c.stopTimeout)
		setDefault(fs, "etcd-servers", etcd.Clients[0].Addr().String(), "http://")
	}

	// kube-apiserver defaults (only where the caller did not pass the flag).
	setDefault(fs, "bind-address", "127.0.0.1", "")
	setDefault(fs, "advertise-address", "127.0.0.1", "")
	setDefault(fs, "secure-port", "0", "")
	setDefault(fs, "cert-dir", p.Dir, "")
	setDefault(fs, "tls-cert-file", p.ServingCert, "")
	setDefault(fs, "tls-private-key-file", p.ServingKey, "")
	setDefault(fs, "client-ca-file", p.CACert, "")
	setDefault(fs, "token-auth-file", p.TokenFile, "")
	setDefault(fs, "service-account-issuer", "https://kubernetes.default.svc.cluster.local", "")
	setDefault(fs, "service-account-key-file", p.SAPub, "")
	setDefault(fs, "service-account-signing-key-file", p.SAKey, "")
	setDefault(fs, "authorization-mode", "RBAC", "")
	// No controller-manager creates "default" ServiceAccounts, so pods must be
	// admitted without one.
	setDefault(fs, "disable-admission-plugins", "ServiceAccount", "")
	setDefault(fs, "service-cluster-ip-range", "10.0.0.0/16", "")
	// The apiserver cannot publish a loopback address as the endpoint of the
	// "kubernetes" Service; nothing here needs that endpoint, so skip it.
	setDefault(fs, "endpoint-reconciler-type", "none", "")
	setDefault(fs, "allow-privileged", "true", "")
	setDefault(fs, "profiling", "false", "")

	// Pre-bind the secure port so that "0" means "a free port" with no race.
	bindHost := s.SecureServing.BindAddress.String()
	ln, err := net.Listen("tcp", net.JoinHostPort(bindHost, strconv.Itoa(s.SecureServing.BindPort)))
	if err != nil {
		logf("listening for kube-apiserver: %v", err)
		return 1
	}
	s.SecureServing.Listener = ln
	s.SecureServing.BindPort = ln.Addr().(*net.TCPAddr).Port
	server := "https://" + net.JoinHostPort(bindHost, strconv.Itoa(s.SecureServing.BindPort))
	if ip := s.SecureServing.BindAddress; ip.IsUnspecified() {
		server = "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.SecureServing.BindPort))
	}

	// What cmd/kube-apiserver does between flag parsing and app.Run.
	if err := s.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
		logf("%v", err)
		return 1
	}
	rest.SetDefaultWarningHandler(rest.NoWarnings{})
	featureGate := s.GenericServerRunOptions.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)
	if err := logsapi.ValidateAndApply(s.Logs, featureGate); err != nil {
		logf("%v", err)
		return 1
	}
	defer klog.Flush()
	completed, err := s.Complete(ctx)
	if err != nil {
		logf("kube-apiserver options: %v", err)
		return 1
	}
	if errs := completed.Validate(); len(errs) != 0 {
		for _, e := range errs {
			logf("invalid kube-apiserver options: %v", e)
		}
		return 1
	}

	apiErr := make(chan error, 1)
	apiDone := make(chan struct{})
	go func() {
		defer close(apiDone)
		apiErr <- app.Run(ctx, completed)
	}()

	// shutdown stops the apiserver first (etcd is closed by the deferred
	// closeEtcd afterwards). A second signal aborts immediately.
	shutdown := func(code int) int {
		cancel()
		select {
		case <-apiDone:
		case <-sigCh:
			logf("second signal, exiting immediately")
			os.Exit(1)
		case <-time.After(c.stopTimeout):
			logf("kube-apiserver did not stop within %v", c.stopTimeout)
		}
		return code
	}

	// Poll /readyz until ready, then serve until stopped. Stopping before
	// ready is a failure; a signal or the parent going away after it is not.
	started := time.Now()
	deadline := time.After(c.readyTimeout)
	ticker := time.NewTicker(200 * time.Millisecond)
	defer ticker.Stop()
	tick := ticker.C
	client := readyzClient(p)
	stopCode, stopWhen := 1, " before becoming ready"
	for {
		select {
		case sig := <-sigCh:
			logf("got %v%s, shutting down", sig, stopWhen)
			return shutdown(stopCode)
		case <-parentGone:
			return shutdown(stopCode)
		case err := <-apiErr:
			logf("kube-apiserver exited: %v", err)
			return 1
		case err := <-etcdErr:
			logf("etcd failed: %v", err)
			return shutdown(1)
		case <-deadline:
			logf("kube-apiserver not ready after %v", c.readyTimeout)
			return shutdown(1)
		case <-tick:
			if !readyz(client, server, p.AdminToken) {
				continue
			}
			ticker.Stop()
			tick, deadline = nil, nil
			stopCode, stopWhen = 0, ""
			if err := writeKubeconfig(c.kubeconfigOut, server, p); err != nil {
				logf("writing kubeconfig: %v", err)
				return shutdown(1)
			}
			etcdURL := ""
			if etcd != nil {
				etcdURL = " etcd=http://" + etcd.Clients[0].Addr().String()
			}
			fmt.Fprintf(os.Stdout, "envtest ready: server=%s kubeconfig=%s dir=%s pid=%d%s after=%.1fs\n",
				server, c.kubeconfigOut, dir, os.Getpid(), etcdURL, time.Since(started).Seconds())
		}
	}
}

// watchParent closes gone once we are re-parented, i.e. once the process
// that started us has exited.
func watchParent(gone chan<- struct{}) {
	ppid := os.Getppid()
	for range time.Tick(500 * time.Millisecond) {
		if os.Getppid() != ppid {
			logf("parent process %d exited", ppid)
			close(gone)
			return
		}
	}
}

// setDefault sets a flag unless the command line already did. For flags that
// take a list this replaces the built-in default instead of appending to it.
func setDefault(fs *pflag.FlagSet, name, value, prefix string) {
	if fs.Changed(name) {
		return
	}
	f := fs.Lookup(name)
	if f == nil {
		panic("unknown flag " + name)
	}
	if err := f.Value.Set(prefix + value); err != nil {
		panic(fmt.Sprintf("--%s=%s: %v", name, value, err))
	}
}

func startEtcd(c *config, dir string) (*embed.Etcd, error) {
	peerPortFile := filepath.Join(dir, "etcd-peer-port")
	// etcd records the peer URL in its data; keep it stable across restarts.
	if c.etcdPeerPort == 0 {
		if b, err := os.ReadFile(peerPortFile); err == nil {
			if port, err := strconv.Atoi(string(b)); err == nil && portFree(port) {
				c.etcdPeerPort = port
			}
		}
	}
	var err error
	if c.etcdPeerPort == 0 {
		if c.etcdPeerPort, err = freePort(); err != nil {
			return nil, err
		}
	}
	if c.etcdClientPort == 0 {
		if c.etcdClientPort, err = freePort(); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(peerPortFile, []byte(strconv.Itoa(c.etcdPeerPort)), 0o600); err != nil {
		return nil, err
	}

	cfg := embed.NewConfig()
	cfg.Name = "envtest"
	cfg.Dir = filepath.Join(dir, "etcd")
	clientURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(c.etcdClientPort))}
	peerURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(c.etcdPeerPort))}
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.UnsafeNoFsync = c.etcdNoFsync
	cfg.Logger = "zap"
	cfg.LogLevel = c.etcdLogLevel
	cfg.LogOutputs = []string{"stderr"}
	// Keep history bounded for long-running demo sessions.
	cfg.AutoCompactionMode = embed.CompactorModePeriodic
	cfg.AutoCompactionRetention = "5m"

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, err
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("etcd not ready after 60s")
	}
}

func closeEtcd(e *embed.Etcd, timeout time.Duration) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Close()
	}()
	select {
	case <-done:
		logf("stopped")
	case <-time.After(timeout):
		logf("etcd did not stop within %v", timeout)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func readyzClient(p *pki) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(p.CACertPEMData)
	return &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
}

func readyz(client *http.Client, server, token string) bool {
	req, err := http.NewRequest(http.MethodGet, server+"/readyz", nil)
	if err != nil {
		return false
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func writeKubeconfig(path, server string, p *pki) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["envtest"] = &clientcmdapi.Cluster{
		Server:                   server,
		CertificateAuthorityData: p.CACertPEMData,
	}
	cfg.AuthInfos[adminUser] = &clientcmdapi.AuthInfo{Token: p.AdminToken}
	cfg.Contexts["envtest"] = &clientcmdapi.Context{
		Cluster:   "envtest",
		AuthInfo:  adminUser,
		Namespace: "default",
	}
	cfg.CurrentContext = "envtest"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return writeAtomic(path, data, 0o600)
}
