// Command endpointslice-controller runs the Kubernetes EndpointSlice controller
// (k8s.io/kubernetes/pkg/controller/endpointslice, the one kube-controller-manager
// runs as "endpointslice-controller") on its own, against any API server, with
// leader election off. It exists to benchmark laneway side by side with the
// built-in controller on the same kube-apiserver.
//
// Defaults match kube-controller-manager v1.34: 5 workers
// (--concurrent-service-endpoint-syncs), client QPS 20 / burst 30
// (--kube-api-qps/--kube-api-burst), protobuf content type, batch period 0
// (--endpointslice-updates-batch-period), 100 endpoints per slice
// (--max-endpoints-per-slice), informer resync 12h-24h, managedFields trimmed
// from cached objects.
//
// stdout gets exactly one line, "endpointslice-controller ready", once the
// informers have synced; logs (klog) go to stderr. SIGTERM/SIGINT stop it
// cleanly; a second signal exits at once.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	_ "k8s.io/component-base/metrics/prometheus/restclient" // rest_client_* metrics
	_ "k8s.io/component-base/metrics/prometheus/workqueue"  // workqueue_* metrics
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/endpointslice"
)

const userAgent = "endpointslice-controller"

// apiRequests counts the HTTP requests the controller's clients sent, by
// Kubernetes verb (get, list, watch, create, update, patch, delete, ...) as
// the API server's audit log would name it.
var apiRequests = metrics.NewCounterVec(&metrics.CounterOpts{
	Name:           "endpointslice_controller_api_requests_total",
	Help:           "API requests made by this process, by client (controller or informers), verb, resource and HTTP status code.",
	StabilityLevel: metrics.ALPHA,
}, []string{"client", "verb", "resource", "code"})

var requestInfo = &request.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

type countingTransport struct {
	client string
	next   http.RoundTripper
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	verb, resource := "unknown", ""
	if info, err := requestInfo.NewRequestInfo(req); err == nil {
		verb, resource = info.Verb, info.Resource
		if info.Subresource != "" {
			resource += "/" + info.Subresource
		}
	}
	resp, err := t.next.RoundTrip(req)
	code := "error"
	if err == nil {
		code = strconv.Itoa(resp.StatusCode)
	}
	apiRequests.WithLabelValues(t.client, verb, resource, code).Inc()
	return resp, err
}

func main() {
	os.Exit(run())
}

func run() int {
	fs := flag.NewFlagSet("endpointslice-controller", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "Path to a kubeconfig (defaults to $KUBECONFIG); empty = in-cluster config.")
	workers := fs.Int("workers", 5, "Service sync workers (kube-controller-manager --concurrent-service-endpoint-syncs).")
	qps := fs.Float64("qps", 20, "Client QPS per client (kube-controller-manager --kube-api-qps).")
	burst := fs.Int("burst", 30, "Client burst per client (kube-controller-manager --kube-api-burst).")
	unthrottled := fs.Bool("unthrottled", false, "Disable the client-side rate limiter (QPS -1); overrides --qps/--burst.")
	batchPeriod := fs.Duration("batch-period", 0, "Delay added to syncs triggered by pod changes (kube-controller-manager --endpointslice-updates-batch-period).")
	maxPerSlice := fs.Int("max-endpoints-per-slice", 100, "Maximum endpoints per EndpointSlice (kube-controller-manager --max-endpoints-per-slice).")
	contentType := fs.String("content-type", "application/vnd.kubernetes.protobuf", "Content type for API requests (kube-controller-manager --kube-api-content-type).")
	metricsAddr := fs.String("metrics-addr", "", "Serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9100; empty = off).")
	featureGates := fs.String("feature-gates", "", "Kubernetes feature gates, e.g. PreferSameTrafficDistribution=false (defaults as in kube-controller-manager v1.34).")
	klog.InitFlags(fs) // -v, --logtostderr (default true), ...
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "endpointslice-controller: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *featureGates != "" {
		if err := utilfeature.DefaultMutableFeatureGate.Set(*featureGates); err != nil {
			klog.ErrorS(err, "invalid --feature-gates")
			return 2
		}
	}

	var cfg *rest.Config
	var err error
	if *kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", *kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		klog.ErrorS(err, "cannot load client config", "kubeconfig", *kubeconfig)
		return 1
	}
	cfg.UserAgent = userAgent
	cfg.ContentType = *contentType
	cfg.AcceptContentTypes = *contentType
	if *contentType != "application/json" {
		cfg.AcceptContentTypes += ",application/json"
	}
	cfg.QPS, cfg.Burst = float32(*qps), *burst
	if *unthrottled {
		cfg.QPS, cfg.Burst, cfg.RateLimiter = -1, 0, nil
	}
	// Two clients, each with its own rate limiter, like kube-controller-manager
	// ("shared-informers" for list/watch, "endpointslice-controller" for writes).
	newClient := func(name string) (*kubernetes.Clientset, error) {
		c := rest.CopyConfig(cfg)
		c.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &countingTransport{client: name, next: rt} })
		return kubernetes.NewForConfig(c)
	}
	informerClient, err := newClient("informers")
	if err != nil {
		klog.ErrorS(err, "cannot create client")
		return 1
	}
	controllerClient, err := newClient("controller")
	if err != nil {
		klog.ErrorS(err, "cannot create client")
		return 1
	}
	legacyregistry.MustRegister(apiRequests)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctx = klog.NewContext(ctx, klog.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		s := <-sigs
		klog.InfoS("shutting down", "signal", s.String())
		cancel()
		<-sigs
		klog.InfoS("second signal, exiting now")
		os.Exit(1)
	}()

	var srv *http.Server
	if *metricsAddr != "" {
		ln, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			klog.ErrorS(err, "cannot listen", "metrics-addr", *metricsAddr)
			return 1
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", legacyregistry.Handler())
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
		srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		klog.InfoS("serving metrics", "addr", "http://"+ln.Addr().String()+"/metrics")
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				klog.ErrorS(err, "metrics server failed")
			}
		}()
	}

	// kube-controller-manager: resync = --min-resync-period (12h) * [1, 2),
	// managedFields trimmed from everything cached.
	resync := time.Duration(float64(12*time.Hour) * (rand.Float64() + 1))
	trim := func(obj interface{}) (interface{}, error) {
		if a, err := meta.Accessor(obj); err == nil && a.GetManagedFields() != nil {
			a.SetManagedFields(nil)
		}
		return obj, nil
	}
	factory := informers.NewSharedInformerFactoryWithOptions(informerClient, resync, informers.WithTransform(trim))
	ctrl := endpointslice.NewController(ctx,
		factory.Core().V1().Pods(),
		factory.Core().V1().Services(),
		factory.Core().V1().Nodes(),
		factory.Discovery().V1().EndpointSlices(),
		int32(*maxPerSlice),
		controllerClient,
		*batchPeriod,
	)
	start := time.Now()
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok { // only when ctx was cancelled (signal) before the caches synced
			klog.InfoS("informer did not sync before shutdown", "type", typ)
			factory.Shutdown()
			klog.Flush()
			return 0
		}
	}
	klog.InfoS("informers synced", "after", time.Since(start), "workers", *workers,
		"qps", cfg.QPS, "burst", cfg.Burst, "batchPeriod", *batchPeriod, "maxEndpointsPerSlice", *maxPerSlice)

	done := make(chan struct{})
	go func() {
		defer close(done)
		ctrl.Run(ctx, *workers)
	}()
	fmt.Println("endpointslice-controller ready")

	<-done // Run returns once ctx is cancelled and its queues are shut down
	factory.Shutdown()
	if srv != nil {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = srv.Shutdown(sctx)
		scancel()
	}
	klog.InfoS("stopped")
	klog.Flush()
	return 0
}
