// Command kstatus computes the kstatus verdict (the status library Flux uses
// for health checks, sigs.k8s.io/cli-utils/pkg/kstatus/status) of laneway
// objects, either live from the cluster in $KUBECONFIG or from JSON files.
//
//	kstatus [-n NAMESPACE] KIND/NAME...   # kinds: laneroute, tagrule, laneentry
//	kstatus -f OBJ.json [-f OBJ2.json...] # no cluster needed ("-" = stdin)
//
// Prints one JSON line per object:
//
//	{"kind":"LaneRoute","name":"dev-alice","status":"Current","message":"Resource is Ready"}
//
// Exit status: 0 when every object was evaluated (whatever its verdict),
// 1 on any error (object not found, unreadable file, bad arguments); an
// object that could not be read still gets a line, with status "Error" or
// "NotFound".
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

const group, version = "laneway.io", "v1alpha1"

// kinds maps every accepted spelling to the resource.
var kinds = map[string]struct{ kind, plural string }{}

func init() {
	for _, k := range []struct{ kind, plural, short string }{
		{"LaneRoute", "laneroutes", "lr"},
		{"TagRule", "tagrules", "tr"},
		{"LaneEntry", "laneentries", ""},
	} {
		v := struct{ kind, plural string }{k.kind, k.plural}
		for _, n := range []string{strings.ToLower(k.kind), k.plural, k.short,
			k.plural + "." + group, strings.ToLower(k.kind) + "." + group} {
			if n != "" {
				kinds[n] = v
			}
		}
	}
}

type line struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Status    string `json:"status"`
	Message   string `json:"message"`
}

type fileList []string

func (f *fileList) String() string     { return strings.Join(*f, ",") }
func (f *fileList) Set(s string) error { *f = append(*f, s); return nil }

func main() {
	var files fileList
	ns := flag.String("n", "", "namespace (default: the kubeconfig context's, else \"default\")")
	flag.Var(&files, "f", "read the object from this JSON file instead of the cluster (repeatable, - = stdin)")
	timeout := flag.Duration("timeout", 30*time.Second, "timeout for all API requests")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: kstatus [-n NAMESPACE] KIND/NAME...\n       kstatus -f OBJ.json...\nkinds: laneroute (lr), tagrule (tr), laneentry\n")
		flag.PrintDefaults()
	}
	flag.Parse()

	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	failed := false
	emit := func(l line) {
		if err := enc.Encode(l); err != nil {
			fmt.Fprintln(os.Stderr, "kstatus:", err)
			os.Exit(1)
		}
	}

	if len(files) > 0 {
		if flag.NArg() > 0 {
			fmt.Fprintln(os.Stderr, "kstatus: give either -f files or KIND/NAME arguments, not both")
			os.Exit(2)
		}
		for _, f := range files {
			u, err := readFile(f)
			if err != nil {
				fmt.Fprintf(os.Stderr, "kstatus: %s: %v\n", f, err)
				emit(line{Name: f, Status: "Error", Message: err.Error()})
				failed = true
				continue
			}
			l, err := compute(u)
			if err != nil {
				fmt.Fprintf(os.Stderr, "kstatus: %s: %v\n", f, err)
				failed = true
			}
			emit(l)
		}
		exit(failed)
	}

	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	type target struct {
		gvr        schema.GroupVersionResource
		kind, name string
	}
	var targets []target
	for _, a := range flag.Args() {
		k, n, ok := strings.Cut(a, "/")
		r, known := kinds[strings.ToLower(k)]
		if !ok || n == "" || !known {
			fmt.Fprintf(os.Stderr, "kstatus: %q: want KIND/NAME with KIND one of laneroute, tagrule, laneentry\n", a)
			os.Exit(2)
		}
		targets = append(targets, target{schema.GroupVersionResource{Group: group, Version: version, Resource: r.plural}, r.kind, n})
	}

	rules := clientcmd.NewDefaultClientConfigLoadingRules() // honours $KUBECONFIG
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	cfg, err := cc.ClientConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kstatus: kubeconfig:", err)
		os.Exit(1)
	}
	if *ns == "" {
		if *ns, _, err = cc.Namespace(); err != nil || *ns == "" {
			*ns = "default"
		}
	}
	cfg.UserAgent = "laneway-kstatus"
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kstatus:", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	for _, t := range targets {
		u, err := client.Resource(t.gvr).Namespace(*ns).Get(ctx, t.name, metav1.GetOptions{})
		if err != nil {
			st := "Error"
			if apierrors.IsNotFound(err) {
				st = string(status.NotFoundStatus)
			}
			fmt.Fprintf(os.Stderr, "kstatus: %s/%s: %v\n", t.kind, t.name, err)
			emit(line{Kind: t.kind, Namespace: *ns, Name: t.name, Status: st, Message: err.Error()})
			failed = true
			continue
		}
		l, err := compute(u)
		if err != nil {
			fmt.Fprintf(os.Stderr, "kstatus: %s/%s: %v\n", t.kind, t.name, err)
			failed = true
		}
		emit(l)
	}
	exit(failed)
}

func exit(failed bool) {
	if failed {
		os.Exit(1)
	}
	os.Exit(0)
}

// readFile decodes one object with the apimachinery unstructured decoder, so
// integers become int64 exactly as in objects a client reads from the API
// server (status.Compute reads metadata.generation with NestedInt64).
func readFile(path string) (*unstructured.Unstructured, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		return nil, err
	}
	return u, nil
}

func compute(u *unstructured.Unstructured) (line, error) {
	l := line{Kind: u.GetKind(), Namespace: u.GetNamespace(), Name: u.GetName()}
	res, err := status.Compute(u)
	if err != nil {
		l.Status, l.Message = "Error", err.Error()
		return l, err
	}
	l.Status, l.Message = string(res.Status), res.Message
	return l, nil
}
